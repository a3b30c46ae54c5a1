"""Writing tidy result tables (one row per grid point x strategy), and the
checkout they came from."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              cwd=PACKAGE_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """The checkout's HEAD commit and whether tracked files differ from it
    (None where git or the repository is missing)."""
    sha = _git("rev-parse", "HEAD") or None
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return sha, None if dirty is None else bool(dirty)


TABLE_SUFFIXES = (".csv", ".parquet")


def check_table_path(path: str | Path, suffixes: tuple[str, ...] = TABLE_SUFFIXES,
                     name: str = "table path") -> Path:
    """``path`` as a Path, or a ValueError in one line naming it (as ``name``) and the rule: a
    known suffix, not a folder, in a folder that exists or can be made (not under a file), where
    this process can write.  Called before any work, so that a bad path loses nothing."""
    path = Path(path)
    said = f"{name} {str(path)!r}"
    if path.suffix not in suffixes:
        raise ValueError(f"{said}: must end in {' or '.join(suffixes)}")
    if os.path.isdir(path):  # os.path: a path it may not look into reads as absent, not an error
        raise ValueError(f"{said}: is a folder; must name a file")
    folder = path.parent
    while not os.path.exists(folder) and folder != folder.parent:  # the folder made later: where it would go
        folder = folder.parent
    if not os.path.isdir(folder):
        raise ValueError(f"{said}: {str(folder)!r} is not a folder")
    try:  # the only sure test of writing there (permissions, read-only mounts, /proc) is to write
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{said}: cannot write in {str(folder)!r} ({e.strerror or e})") from None
    return path


def write_table(rows, path: str | Path, metadata: dict[bytes, bytes] | None = None) -> Path:
    """Write rows (dicts, or a DataFrame) as CSV or Parquet, chosen by the file's suffix, through
    a temporary file renamed over ``path``: a reader never sees half a table, and a failure leaves
    no temporary behind.  ``metadata``: added to a Parquet file's schema metadata."""
    import pandas as pd

    path = check_table_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    tmp = path.with_name(path.name + ".tmp")
    try:
        if path.suffix == ".csv":
            tmp.write_bytes(csv_bytes(frame))
        else:
            _write_parquet(frame, tmp, metadata or {})
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # gone after the rename; after a failure, half a table
    return path


def _write_parquet(frame, path: Path, metadata: dict[bytes, bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    pq.write_table(table, path)


def csv_bytes(frame) -> bytes:
    """A frame as ``write_table`` writes it to CSV (so a CSV can be compared with what it holds)."""
    return frame.to_csv(index=False).encode()
