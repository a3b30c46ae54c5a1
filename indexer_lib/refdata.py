"""The repository's ``data/`` folder: the published figures the project checks itself
against (``data/field/``) and measurements with provenance (``data/h200/``).

Plain CSV files, read with the standard library, each row naming its source
(``data/README.md`` says where every file comes from).  This sits at the bottom
of the package, next to ``presets`` and ``padding``: any layer may read it.
"""
from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def data_path(*parts: str) -> Path:
    """A path under the repository's ``data/`` folder."""
    return DATA_DIR.joinpath(*parts)


@lru_cache(maxsize=None)
def _read(path: Path) -> tuple[dict[str, str], ...]:
    with path.open(newline="") as f:
        return tuple(csv.DictReader(f))


def read_rows(*parts: str) -> list[dict[str, str]]:
    """The rows of a CSV file under ``data/`` as dicts of strings (in file order)."""
    path = data_path(*parts)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: reference data missing; indexer-lab reads it from the repository's data/ "
            "folder, so install the project from its checkout (pip install -e .)")
    return [dict(r) for r in _read(path)]


def number(text: str) -> int | float | None:
    """A CSV cell as a number: an int where it is whole, None where it is empty."""
    if text is None or text.strip() == "":
        return None
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value
