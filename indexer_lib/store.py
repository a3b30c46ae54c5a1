"""A resumable result store for sweeps: an append-only journal, compacted to Parquet.

Layout, for a table ``results/x/sweep.parquet``:

- ``sweep.parquet.journal``: the source of truth.  Line 1 is a header naming the
  grid (and its hash); every further line is one finished task with its rows.
  Each line is ``<crc32 hex> <json>\\n``, written with one ``write`` on an
  ``O_APPEND`` descriptor and ``fsync``'d before the sweep moves on.  A ``kill -9``
  can only tear the last line; a torn last line (no newline or a bad checksum) is
  cut off on the next open, every complete line survives.  A task id appears at
  most once: a restart skips the tasks the journal already holds.
- ``sweep.parquet``: the tidy table, rewritten from the journal at the end
  (temporary file + rename, so a reader never sees half a table).  Its schema
  metadata carries the same header, so a finished table is recognised too.
- ``sweep.parquet.lock``: an ``flock`` held while a sweep writes, so two sweeps
  on one file refuse instead of interleaving.

Anything that is not ours, is damaged beyond a torn tail, or belongs to another
grid raises ``StoreError`` and is left exactly as it was.
"""
from __future__ import annotations

import fcntl
import json
import os
import zlib
from pathlib import Path

JOURNAL_KIND = "indexer-lab sweep journal"
SCHEMA_VERSION = 1
PARQUET_KEY = b"indexer_lab_sweep"  # schema-metadata key holding the header


class StoreError(Exception):
    """The result file cannot be used: foreign, corrupt, another grid, or busy."""


def _line(payload: dict) -> bytes:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    data = text.encode()
    return b"%08x %s\n" % (zlib.crc32(data), data)


def _parse(line: bytes) -> dict | None:
    """The payload of one complete journal line, or None when it is damaged."""
    if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
        return None
    data = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(data):
            return None
        return json.loads(data)
    except ValueError:
        return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def describe_difference(stored: dict, wanted: dict) -> str:
    names = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
    return ", ".join(f"{k}: {stored.get(k)!r} there, {wanted.get(k)!r} now" for k in names)


class ResultStore:
    """Open with ``with ResultStore(path, header) as store``; ``store.done`` maps task
    ids to their rows; ``store.append(task, rows)`` makes a task durable."""

    def __init__(self, path: str | Path, header: dict):
        self.path = Path(path)
        if self.path.suffix != ".parquet":
            raise StoreError(f"result table {str(self.path)!r}: must end in .parquet")
        self.journal = self.path.with_name(self.path.name + ".journal")
        self.lockfile = self.path.with_name(self.path.name + ".lock")
        self.header = {"kind": JOURNAL_KIND, "schema": SCHEMA_VERSION, **header}
        self.done: dict[str, list[dict]] = {}
        self.notes: list[str] = []  # what opening had to repair (a torn last line)
        self._fd = self._lock_fd = None

    # -- opening ---------------------------------------------------------------
    def __enter__(self) -> "ResultStore":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self._check_table()
            if self.journal.exists():
                self._load_journal()
            else:
                self._create_journal()
            self._fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def _lock(self) -> None:
        self._lock_fd = os.open(self.lockfile, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise StoreError(f"{self.path}: another sweep is writing it now "
                             "(wait for it, or choose another output)") from None

    def _check_header(self, found, where: str) -> None:
        if not isinstance(found, dict) or found.get("kind") != JOURNAL_KIND:
            raise StoreError(f"{where} is not an indexer-lab sweep result: refusing to touch it "
                             "(move it away or choose another output)")
        if found.get("schema") != SCHEMA_VERSION:
            raise StoreError(f"{where} has result schema {found.get('schema')!r}, this version "
                             f"writes {SCHEMA_VERSION}: left as it is (choose another output)")
        if found.get("grid_hash") != self.header.get("grid_hash"):
            diff = describe_difference(found.get("spec", {}), self.header.get("spec", {}))
            raise StoreError(f"{where} holds a different sweep ({diff}): refusing to mix them "
                             "(choose another output, or delete it to start over)")

    def _check_table(self) -> None:
        """A finished table next to the journal must be ours and of this grid."""
        if not self.path.exists():
            return
        import pyarrow.parquet as pq

        try:
            meta = pq.read_schema(self.path).metadata or {}
        except Exception as e:  # pyarrow raises several kinds for a damaged file
            raise StoreError(f"{self.path} is not a readable Parquet file ({e}): "
                             "left as it is (move it away or choose another output)") from None
        raw = meta.get(PARQUET_KEY)
        try:
            found = json.loads(raw) if raw else None
        except ValueError:
            found = None
        self._check_header(found, str(self.path))
        if not self.journal.exists():
            # a finished table whose journal was removed: its rows are done work
            self._create_journal()
            table = pq.read_table(self.path).to_pandas()
            for task, group in table.groupby("task", sort=False):
                self.done[task] = group.to_dict("records")
            self._fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND)
            try:
                for task, rows in list(self.done.items()):
                    self._write({"task": task, "rows": _plain(rows)})
            finally:
                os.close(self._fd)
                self._fd = None
            self.done.clear()  # reloaded from the new journal, as plain values

    def _create_journal(self) -> None:
        tmp = self.journal.with_name(self.journal.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(_line(self.header))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.journal)
        _fsync_dir(self.journal.parent)

    def _load_journal(self) -> None:
        with open(self.journal, "rb") as f:
            lines = f.readlines()
        header = _parse(lines[0]) if lines else None
        if header is None:
            raise StoreError(f"{self.journal} does not start with an indexer-lab sweep header: "
                             "refusing to touch it (move it away or choose another output)")
        self._check_header(header, str(self.journal))
        good_bytes = len(lines[0])
        for n, line in enumerate(lines[1:], start=2):
            record = _parse(line)
            if record is None or "task" not in record or "rows" not in record:
                if n == len(lines):  # only the last line can be torn by a kill
                    self._cut_torn_tail(good_bytes, n)
                    break
                raise StoreError(f"{self.journal} line {n} is damaged (not a torn last line): "
                                 "left as it is; move it away to start over")
            # a task is written once; should a copy ever appear, the first one counts
            self.done.setdefault(record["task"], record["rows"])
            good_bytes += len(line)

    def _cut_torn_tail(self, good_bytes: int, line_no: int) -> None:
        os.truncate(self.journal, good_bytes)
        self.notes.append(f"{self.journal}: dropped the torn last line {line_no} "
                          "(a write interrupted by a kill); its task runs again")

    # -- writing ---------------------------------------------------------------
    def _write(self, payload: dict) -> None:
        data = _line(payload)
        written = os.write(self._fd, data)
        if written != len(data):  # a short write would leave a torn line behind
            raise OSError(f"short write to {self.journal}: {written} of {len(data)} bytes")
        os.fsync(self._fd)

    def append(self, task: str, rows: list[dict]) -> None:
        """Make one finished task durable before the sweep starts the next."""
        if task in self.done:
            raise StoreError(f"task {task!r} is already in {self.journal}")
        rows = _plain(rows)
        self._write({"task": task, "rows": rows})
        self.done[task] = rows

    def rows(self, order: list[str] | None = None) -> list[dict]:
        tasks = order if order is not None else list(self.done)
        return [row for t in tasks if t in self.done for row in self.done[t]]

    def compact(self, frame) -> Path:
        """Write ``frame`` (the journal's rows as a DataFrame) as the Parquet table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[PARQUET_KEY] = json.dumps(self.header, sort_keys=True).encode()
        table = table.replace_schema_metadata(meta)
        tmp = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        return self.path


def _plain(rows: list[dict]) -> list[dict]:
    """Rows as JSON-able builtins (numpy scalars from pandas become Python numbers)."""
    out = []
    for row in rows:
        plain = {}
        for k, v in row.items():
            if hasattr(v, "item") and not isinstance(v, (str, bytes)):
                v = v.item()
            if isinstance(v, float) and v != v:  # NaN: JSON has no NaN, store a null
                v = None
            plain[k] = v
        out.append(plain)
    return out
