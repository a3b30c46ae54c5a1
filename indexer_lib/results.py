"""Writing tidy result tables (one row per grid point x strategy)."""
from __future__ import annotations

from pathlib import Path


def check_table_path(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise ValueError(f"table path {str(path)!r}: must end in .csv or .parquet")
    return path


def write_table(rows: list[dict], path: str | Path) -> Path:
    """Write rows as CSV or Parquet, chosen by the file's suffix."""
    import pandas as pd

    path = check_table_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".csv":
        frame.to_csv(tmp, index=False)
    else:
        frame.to_parquet(tmp, index=False)
    tmp.replace(path)  # never leave a half-written table under the real name
    return path
