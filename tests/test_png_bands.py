"""The live figures' PNG encoder (``notebook.png_bands``): every PNG decodes to the pixels given,
its checksums hold, a band whose pixels did not change keeps its bytes, and the bytes depend on
the pixels alone (the pixel-for-pixel tests of the dashboards compare PNG bytes)."""
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from indexer_lib.notebook.png_bands import BandedPng


def opaque(rng, height, width):
    rgba = rng.integers(0, 256, (height, width, 4), dtype=np.uint8)
    rgba[:, :, 3] = 255
    rgba[height // 3:, : width // 2, :3] = 255  # a flat area, as figures have
    return rgba


def decoded(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as im:
        assert im.mode == "RGB"
        return np.asarray(im)


def idat(png: bytes) -> bytes:
    """The IDAT payload, after checking every chunk's CRC."""
    pos, data = 8, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body)
        data += body if kind == b"IDAT" else b""
        pos += 12 + length
    return data


@pytest.mark.parametrize("height, width", [(1, 1), (15, 7), (16, 16), (17, 33), (396, 990)])
def test_a_png_decodes_to_the_pixels_given(height, width):
    rgba = opaque(np.random.default_rng(height * width), height, width)
    png = BandedPng().encode(rgba)
    assert np.array_equal(decoded(png), rgba[:, :, :3])
    rows = zlib.decompress(idat(png))  # the zlib stream's own checksum (adler32) holds
    assert len(rows) == height * (1 + 3 * width)


def test_only_the_bands_that_changed_are_compressed_again_and_the_bytes_are_the_pixels_own():
    rng = np.random.default_rng(1)
    encoder = BandedPng(band_rows=16)
    first = opaque(rng, 100, 40)  # 7 bands, the last one 4 rows
    encoder.encode(first)
    assert encoder.compressed == 7
    assert encoder.encode(first) == BandedPng().encode(first) and encoder.compressed == 0
    moved = first.copy()
    moved[20, 5, 0] ^= 1  # band 1
    moved[99, 39, 2] ^= 1  # the last band
    png = encoder.encode(moved)
    assert encoder.compressed == 2
    assert png == BandedPng().encode(moved)  # as if nothing had been encoded before
    assert np.array_equal(decoded(png), moved[:, :, :3])
    back = encoder.encode(first)  # and back again
    assert encoder.compressed == 2 and np.array_equal(decoded(back), first[:, :, :3])


def test_another_size_starts_afresh():
    rng = np.random.default_rng(2)
    encoder = BandedPng()
    encoder.encode(opaque(rng, 64, 64))
    other = opaque(rng, 48, 80)
    png = encoder.encode(other)
    assert encoder.compressed == 3 and np.array_equal(decoded(png), other[:, :, :3])
