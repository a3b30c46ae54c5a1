"""PNG of a live figure's canvas, compressed band by band so a redraw pays for what it changed.

A dashboard's move redraws a few regions (a line, a legend, a title) and sends the whole figure
as PNG.  Compressing the whole canvas again costs about as much as the redraw.  Here the image's
rows are cut into bands; each band is its own run of deflate blocks (a fresh compressor, ended
at a byte boundary), so the compressed bytes of a band whose pixels did not change are kept and
put back as they were.  The PNG is a function of the pixels alone: the same pixels give the same
bytes, whatever was encoded before.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

BAND_ROWS = 16  # rows per band: small enough to keep what did not change, large enough to compress
_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, fastest level (the header's check bits hold)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


class BandedPng:
    """Encodes RGBA pixels (``[height, width, 4]`` uint8, opaque) as an RGB PNG, keeping each
    band's pixels and compressed bytes for the next call."""

    def __init__(self, band_rows: int = BAND_ROWS):
        self.band_rows = band_rows
        self.shape = None
        self.pixels: list[np.ndarray] = []  # per band, the RGBA rows last encoded
        self.raw: list[bytes] = []  # per band, the filtered rows (filter byte 0, then RGB)
        self.packed: list[bytes] = []  # per band, its deflate blocks
        self.compressed = 0  # bands compressed by the last call (the others were kept)

    def encode(self, rgba: np.ndarray) -> bytes:
        height, width = rgba.shape[:2]
        if rgba.shape != self.shape:  # another size: nothing kept applies
            self.shape, self.pixels, self.raw, self.packed = rgba.shape, [], [], []
        starts = range(0, height, self.band_rows)
        last = len(starts) - 1
        self.compressed = 0
        for k, r0 in enumerate(starts):
            band = rgba[r0:r0 + self.band_rows]
            if k < len(self.pixels) and np.array_equal(band, self.pixels[k]):
                continue
            rows = np.empty((band.shape[0], 1 + 3 * width), np.uint8)
            rows[:, 0] = 0  # PNG filter type None
            rows[:, 1:] = band[:, :, :3].reshape(band.shape[0], -1)
            raw = rows.tobytes()
            packer = zlib.compressobj(1, zlib.DEFLATED, -15)  # raw deflate, no references to other bands
            packed = packer.compress(raw) + packer.flush(zlib.Z_FINISH if k == last else zlib.Z_SYNC_FLUSH)
            if k < len(self.pixels):
                self.pixels[k], self.raw[k], self.packed[k] = band.copy(), raw, packed
            else:
                self.pixels.append(band.copy())
                self.raw.append(raw)
                self.packed.append(packed)
            self.compressed += 1
        checksum = 1
        for raw in self.raw:
            checksum = zlib.adler32(raw, checksum)
        stream = _ZLIB_HEADER + b"".join(self.packed) + struct.pack(">I", checksum)
        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
        return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")
