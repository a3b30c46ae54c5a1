"""How indexer-lab runs: headless when ``scripts/run_notebooks.py`` executes the notebooks (it sets
``INDEXER_LAB_HEADLESS``).  An executed notebook is read, not clicked: a dashboard shows its first
state with a note, and long work draws no progress bar (it would be saved frozen at 0%)."""
from __future__ import annotations

import os

HEADLESS_ENV = "INDEXER_LAB_HEADLESS"
# set (the main job, the notebook test): a saved figure that breaks the figure style raises
STRICT_FIGURES_ENV = "INDEXER_LAB_STRICT_FIGURES"


def headless() -> bool:
    return os.environ.get(HEADLESS_ENV, "") not in ("", "0")


def strict_figures() -> bool:
    return os.environ.get(STRICT_FIGURES_ENV, "") not in ("", "0")
