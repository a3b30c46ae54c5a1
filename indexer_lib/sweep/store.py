"""A resumable result store for sweeps: an append-only journal, compacted to Parquet (the
frontier's table, ``sweep.frontier``, may be a CSV).

Layout, for a table ``results/x/sweep.parquet``:

- ``sweep.parquet.journal``: the source of truth.  Line 1 is a header naming the
  grid (and its hash); every further line is one finished task with its rows.
  Each line is ``<crc32 hex> <json>\\n``, written with one ``write`` on an
  ``O_APPEND`` descriptor before the sweep moves on, so a ``kill -9`` loses no
  finished task and can only tear the last line; a torn last line (no newline
  or a bad checksum) is cut off on the next open, every complete line survives.
  ``fsync`` (against a power loss) follows every task, or at most every
  ``sync_seconds`` for cheap tasks (model mode), and always on close.  A task id
  appears at most once: a restart skips the tasks the journal already holds.
- ``sweep.parquet``: the tidy table, rewritten from the journal at the end
  (temporary file + rename, so a reader never sees half a table), streamed in
  row groups: the store keeps only each task's place in the journal, never the
  rows, so a grid of any size runs in bounded memory.  Its schema metadata
  carries the same header, so a finished table is recognised too.  A CSV table
  carries none: it is recognised by its journal only (``sweep.frontier``).
- ``sweep.parquet.lock``: an ``flock`` held while a sweep writes, so two sweeps
  on one file refuse instead of interleaving; removed when the store closes.

Anything that is not ours, is damaged beyond a torn tail, or belongs to another
grid raises ``StoreError`` and is left exactly as it was, unless the store is
opened with ``replace``: then the table is not read (it is rewritten at the end)
and a journal that is not this grid's starts over.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
import zlib
from pathlib import Path

from .results import check_table_path

JOURNAL_KIND = "indexer-lab sweep journal"
# 3: each row names the scheduler settings that differ from its release's defaults;
# 4: each row names its prompt lengths' range ratio, mix and seed;
# 5: and its speculative tokens and KV cache;
# 6: and the GPU whose modelled time its worst step shows (model_time_gpu)
SCHEMA_VERSION = 6
PARQUET_KEY = b"indexer_lab_sweep"  # schema-metadata key holding the header


class StoreError(Exception):
    """The result file cannot be used: foreign, corrupt, another grid, or busy."""


class StoreBusy(StoreError):
    """Another process holds the store's lock."""


ROW_GROUP_ROWS = 4096  # rows per Parquet row group when compacting


def _line(payload: dict) -> bytes:
    # keys in the payload's order: rows read back keep their columns' order (the checksum covers
    # the bytes as written; nothing compares a line's text)
    text = json.dumps(payload, separators=(",", ":"))
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


def without_defaults(spec: dict, defaults: dict) -> dict:
    """A spec as the hash sees it (64 and 64.0 spelled apart), less the settings at their default."""
    spelled = {k: json.dumps(v, sort_keys=True) for k, v in spec.items()}
    return {k: v for k, v in spelled.items() if k not in defaults or v != json.dumps(defaults[k], sort_keys=True)}


def describe_difference(stored: dict, wanted: dict) -> str:
    # as the hash sees them: 64 and 64.0 are spelled apart
    names = sorted(k for k in set(stored) | set(wanted)
                   if json.dumps(stored.get(k), sort_keys=True) != json.dumps(wanted.get(k), sort_keys=True))
    return ", ".join(f"{k}: {stored.get(k)!r} there, {wanted.get(k)!r} now" for k in names)


class ResultStore:
    """Open with ``with ResultStore(path, header) as store``; ``store.done`` maps task
    ids to where their line is in the journal (``store.task_rows(task)`` reads the
    rows back); ``store.append(task, rows)`` makes a task durable.

    ``sync_seconds``: 0 fsyncs after every task; more lets cheap tasks share an
    fsync (a kill still loses nothing written, a power cut at most that long).
    ``replace``: the table is not read (whatever it holds is rewritten at the end) and a
    journal that is not this grid's (or is damaged) starts over; this grid's is resumed.
    """

    def __init__(self, path: str | Path, header: dict, sync_seconds: float = 0.0, replace: bool = False):
        self.path = check_table_path(path)
        self.replace = replace
        self.journal = self.path.with_name(self.path.name + ".journal")
        self.lockfile = self.path.with_name(self.path.name + ".lock")
        self.header = {"kind": JOURNAL_KIND, "schema": SCHEMA_VERSION, **header}
        self.done: dict[str, tuple[int, int]] = {}  # task -> (offset, length) of its line
        self.notes: list[str] = []  # what opening had to repair (a torn last line)
        self.sync_seconds = sync_seconds
        self._fd = self._lock_fd = self._reader = None
        self._size = 0  # bytes of the journal (we are its only writer while locked)
        self._last_sync = 0.0
        self._unsynced = False

    # -- opening ---------------------------------------------------------------
    def __enter__(self) -> "ResultStore":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            if not self.replace:
                self._check_table()
            if self.journal.exists():
                self._load_or_start_over()
            else:
                self._create_journal()
            self._open_append()
            self._last_sync = time.monotonic()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._fd is not None:
            try:
                if self._unsynced:
                    os.fsync(self._fd)
                    self._unsynced = False
            finally:
                os.close(self._fd)
                self._fd = None
        if self._lock_fd is not None:
            # removed while still held: one who opened it meanwhile sees it gone (``_lock``)
            self.lockfile.unlink(missing_ok=True)
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def _open_append(self) -> None:
        self._fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND)
        self._size = os.fstat(self._fd).st_size

    def _lock(self) -> None:
        while self._lock_fd is None:
            fd = os.open(self.lockfile, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreBusy(f"{self.path}: another sweep is writing it now "
                                "(wait for it, or choose another output)") from None
            try:
                current = os.stat(self.lockfile).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                self._lock_fd = fd
            else:  # its holder removed the file as it closed: lock the file there now
                os.close(fd)

    def _check_header(self, found, where: str) -> None:
        if not isinstance(found, dict) or found.get("kind") != JOURNAL_KIND:
            raise StoreError(f"{where} is not an indexer-lab sweep result: refusing to touch it "
                             "(move it away or choose another output)")
        schema = found.get("schema")
        if schema != SCHEMA_VERSION:
            known = isinstance(schema, int) and not isinstance(schema, bool)
            age = ("an older" if schema < SCHEMA_VERSION else "a newer") if known else "an unknown"
            raise StoreError(f"{where} is from {age} indexer-lab (result schema {schema!r}, this "
                             f"version reads and writes {SCHEMA_VERSION}): left as it is "
                             "(choose another output, or move it away to start over)")
        if found.get("grid_hash") != self.header.get("grid_hash"):
            defaults = self.header.get("defaults", {})
            stored, wanted = (without_defaults(h.get("spec", {}), defaults) for h in (found, self.header))
            if stored == wanted:
                return  # a setting added since it was journalled, at its default: the same sweep
            diff = describe_difference(found.get("spec", {}), self.header.get("spec", {}))
            raise StoreError(f"{where} holds a different sweep ({diff}): refusing to mix them "
                             "(choose another output, or delete it to start over)")

    def _check_table(self) -> None:
        """A finished table next to the journal must be ours and of this grid."""
        if not self.path.exists():
            return
        if self.path.suffix == ".csv":
            if not self.journal.exists():  # a CSV carries no header: only its journal names its grid
                raise StoreError(f"{self.path} has no journal beside it to say which grid it holds "
                                 "(a CSV carries no header): left as it is (move it away or choose "
                                 "another output)")
            return  # the journal's header is checked next; the rows by the table's writer
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(self.path)
        except Exception as e:  # pyarrow raises several kinds for a damaged file
            raise StoreError(f"{self.path} is not a readable Parquet file ({e}): "
                             "left as it is (move it away or choose another output)") from None
        self._check_header(_parquet_header(schema), str(self.path))
        if not self.journal.exists():
            # a finished table whose journal was removed: its rows are done work
            self._create_journal()
            self._open_append()
            sync_seconds, self.sync_seconds = self.sync_seconds, float("inf")  # one fsync below
            try:
                task, rows = None, []
                for batch in pq.ParquetFile(self.path).iter_batches(batch_size=ROW_GROUP_ROWS):
                    for row in batch.to_pandas().to_dict("records"):
                        if row["task"] != task and rows:
                            self.append(task, rows)
                            rows = []
                        task = row["task"]
                        rows.append(row)
                if rows:
                    self.append(task, rows)
                os.fsync(self._fd)
                self._unsynced = False
            finally:
                self.sync_seconds = sync_seconds
                os.close(self._fd)
                self._fd = None
            self.done.clear()  # found again when the new journal is read

    def _load_or_start_over(self) -> None:
        try:
            self._load_journal()
        except StoreError:
            if not self.replace:
                raise
            self.done.clear()
            self.notes.append(f"{self.journal}: not this grid's journal, or damaged: replaced")
            self._create_journal()

    def _create_journal(self) -> None:
        tmp = self.journal.with_name(self.journal.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(_line(self.header))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.journal)
        finally:
            tmp.unlink(missing_ok=True)  # gone after the rename; after a failure, a header alone
        _fsync_dir(self.journal.parent)

    def _load_journal(self) -> None:
        """Index the journal's tasks (line by line: memory does not grow with rows)."""
        with open(self.journal, "rb") as f:
            first = f.readline()
            header = _parse(first) if first else None
            if header is None:
                raise StoreError(f"{self.journal} does not start with an indexer-lab sweep "
                                 "header: refusing to touch it (move it away or choose "
                                 "another output)")
            self._check_header(header, str(self.journal))
            offset, n = len(first), 1
            while True:
                line = f.readline()
                if not line:
                    break
                n += 1
                record = _parse(line)
                if record is None or "task" not in record or "rows" not in record:
                    if not f.read(1):  # only the last line can be torn by a kill
                        self._cut_torn_tail(offset, n)
                        break
                    raise StoreError(f"{self.journal} line {n} is damaged (not a torn last "
                                     "line): left as it is; move it away to start over")
                # a task is written once; should a copy ever appear, the first one counts
                self.done.setdefault(record["task"], (offset, len(line)))
                offset += len(line)

    def _cut_torn_tail(self, good_bytes: int, line_no: int) -> None:
        os.truncate(self.journal, good_bytes)
        self.notes.append(f"{self.journal}: dropped the torn last line {line_no} "
                          "(a write interrupted by a kill); its task runs again")

    # -- writing ---------------------------------------------------------------
    def _write(self, payload: dict) -> tuple[int, int]:
        data = _line(payload)
        written = os.write(self._fd, data)
        if written != len(data):  # a short write would leave a torn line behind
            raise OSError(f"short write to {self.journal}: {written} of {len(data)} bytes")
        where = (self._size, len(data))
        self._size += len(data)
        now = time.monotonic()
        if now - self._last_sync >= self.sync_seconds:
            os.fsync(self._fd)
            self._last_sync, self._unsynced = now, False
        else:
            self._unsynced = True
        return where

    def append(self, task: str, rows: list[dict]) -> None:
        """Make one finished task durable before the sweep starts the next."""
        if task in self.done:
            raise StoreError(f"task {task!r} is already in {self.journal}")
        self.done[task] = self._write({"task": task, "rows": _plain(rows)})

    def task_rows(self, task: str) -> list[dict]:
        """The rows of a finished task, read back from the journal."""
        offset, length = self.done[task]
        if self._reader is None:
            self._reader = open(self.journal, "rb")
        self._reader.seek(offset)
        record = _parse(self._reader.read(length))
        if record is None or record.get("task") != task:
            raise StoreError(f"{self.journal}: the line of task {task!r} changed under us")
        return record["rows"]

    def iter_rows(self, order=None):
        """Rows of the finished tasks, in ``order`` (task ids; default: journal order)."""
        for t in (order if order is not None else list(self.done)):
            if t in self.done:
                yield from self.task_rows(t)

    def compact(self, order=None, to_frame=None, row_group_rows: int = ROW_GROUP_ROWS) -> Path:
        """Write the journal's rows (in ``order``: task ids, an iterable that can be
        iterated more than once) as the Parquet table, one row group at a time;
        ``to_frame(rows)`` makes each group's DataFrame (column types)."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.path.suffix != ".parquet":
            raise ValueError(f"{self.path}: compact writes Parquet; a CSV table is written whole (sweep.frontier)")
        to_frame = to_frame or pd.DataFrame
        if self._fd is not None and self._unsynced:  # the table never gets ahead of the journal
            os.fsync(self._fd)
            self._unsynced = False
        tmp = self.path.with_name(self.path.name + ".tmp")
        writer = schema = None

        def groups():
            rows = []
            for row in self.iter_rows(order):
                rows.append(row)
                if len(rows) >= row_group_rows:
                    yield rows
                    rows = []
            if rows or writer is None:
                yield rows

        try:
            for rows in groups():
                frame = to_frame(rows)
                if schema is None:
                    table = pa.Table.from_pandas(frame, preserve_index=False)
                    nulls = [f.name for f in table.schema if pa.types.is_null(f.type)]
                    if nulls:  # all-empty so far: take the type from a later value
                        frame = _typed_like_later_rows(frame, nulls, self.iter_rows(order))
                        table = pa.Table.from_pandas(frame, preserve_index=False)
                    meta = {**(table.schema.metadata or {}), **self.table_metadata()}
                    schema = table.schema.with_metadata(meta)
                    writer = pq.ParquetWriter(tmp, schema)
                table = pa.Table.from_pandas(frame, preserve_index=False)
                table = table.select(schema.names).cast(schema)
                writer.write_table(table, row_group_size=row_group_rows)
            writer.close()
            writer = None
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            if writer is not None:
                writer.close()
            if tmp.exists():
                tmp.unlink()
        _fsync_dir(self.path.parent)
        return self.path

    def table_metadata(self) -> dict[bytes, bytes]:
        """What a Parquet table's schema metadata carries so that it is recognised: the header."""
        return {PARQUET_KEY: json.dumps(self.header, sort_keys=True).encode()}


def _typed_like_later_rows(frame, names: list[str], rows):
    """Give columns that are empty in ``frame`` the type of their first later value."""
    kinds = {}
    for row in rows:
        for name in names:
            if name not in kinds and row.get(name) is not None:
                kinds[name] = type(row[name])
        if len(kinds) == len(names):
            break
    dtypes = {bool: "boolean", int: "Int64", float: "float64", str: "string"}
    frame = frame.copy()
    for name, kind in kinds.items():
        frame[name] = frame[name].astype(dtypes.get(kind, "object"))
    return frame


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


def _parquet_header(schema) -> dict | None:
    """The sweep header a Parquet table's schema carries (None: none, or not readable); the
    tables from before the store carried one read as schema 0."""
    raw = (schema.metadata or {}).get(PARQUET_KEY)
    try:
        found = json.loads(raw) if raw else None
    except ValueError:
        found = None
    if found is None and {b"mode", b"strategy", b"budget_mb"} <= set(name.encode() for name in schema.names):
        # indexer-lab's tables from before the store carried a header
        found = {"kind": JOURNAL_KIND, "schema": 0}
    return found


def stored_schema(path: str | Path) -> int | None:
    """The result schema a sweep table (``.parquet``) or its journal was written with; None when
    the file is not an indexer-lab sweep result (or cannot be read)."""
    path = Path(path)
    try:
        if path.suffix == ".journal":
            with open(path, "rb") as f:
                header = _parse(f.readline())
        else:
            import pyarrow.parquet as pq

            header = _parquet_header(pq.read_schema(path))
    except Exception:  # a damaged or foreign file: not ours to judge here
        return None
    if not isinstance(header, dict) or header.get("kind") != JOURNAL_KIND:
        return None
    schema = header.get("schema")
    return schema if isinstance(schema, int) and not isinstance(schema, bool) else None


def set_aside_older(tables: str | Path) -> list[Path]:
    """Move the sweep tables (and journals) of a folder written by an older indexer-lab into
    ``older-schema-<N>/`` beside them, so that a rerun of the same job starts over without losing
    them; returns where each went.  Tables of this schema, and files that are not ours, stay."""
    tables = Path(tables)
    moved = []
    for path in sorted(list(tables.glob("*.parquet")) + list(tables.glob("*.parquet.journal"))):
        schema = stored_schema(path)
        if schema is None or schema >= SCHEMA_VERSION:
            continue
        aside = tables / f"older-schema-{schema}"
        aside.mkdir(exist_ok=True)
        target = aside / path.name
        os.replace(path, target)
        moved.append(target)
    return moved


def tidy_finished(tables: str | Path) -> list[Path]:
    """Remove the journals and lock files of a folder's finished sweep tables (every task of the
    journal is in the table; nobody holds the lock), so a results folder holds tables only.  A
    later run on the same table rebuilds its journal from the table.  Returns what it removed."""
    import pyarrow.parquet as pq

    tables = Path(tables)
    removed = []
    for journal in sorted(tables.glob("*.parquet.journal")):
        table = journal.with_name(journal.name.removesuffix(".journal"))
        if not table.exists() or stored_schema(table) != SCHEMA_VERSION or stored_schema(journal) != SCHEMA_VERSION:
            continue
        with open(journal, "rb") as f:
            journaled = {r["task"] for r in map(_parse, f.readlines()[1:]) if r and "task" in r}
        if journaled - set(pq.read_table(table, columns=["task"]).column("task").to_pylist()):
            continue  # a task the table lacks: the journal is the only copy
        lock = table.with_name(table.name + ".lock")
        if lock.exists():
            with open(lock, "a") as f:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a sweep is writing it now
                lock.unlink()
                removed.append(lock)
        journal.unlink()
        removed.append(journal)
    return removed
