"""Writing tidy result tables (one row per grid point x strategy), and the
checkout they came from."""
from __future__ import annotations

import subprocess
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


def check_table_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise ValueError(f"table path {str(path)!r}: must end in .csv or .parquet")
    return path


def write_table(rows, path: str | Path) -> Path:
    """Write rows (dicts, or a DataFrame) as CSV or Parquet, chosen by the file's suffix."""
    import pandas as pd

    path = check_table_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".csv":
        frame.to_csv(tmp, index=False)
    else:
        frame.to_parquet(tmp, index=False)
    tmp.replace(path)  # never leave a half-written table under the real name
    return path
