"""The app (``indexer-lab app``): the dashboards of notebooks 01 and 04 on one page, which Voilà
serves from ``notebooks/app.ipynb`` with no code shown.

Their first states are the defaults of the command line: GLM-5 on the latest vLLM on an H200, its own
chunker, 2.63 GiB free; the frontier over the grid's default axes (modelled)."""
from __future__ import annotations

from ..sweep.grid import Grid
from .widgets import AutoDashboard, FrontierDashboard

# auto's engine dropdown: the latest vLLM, the first vLLM with a logits budget, the latest SGLang
AUTO_ENGINES = ("vllm", "vllm==0.19.1", "sglang")
FIRST_BUDGET_MB = 512  # the budget slider's first notch


def frontier() -> FrontierDashboard:
    """The OOM frontier's dashboard on the release's own chunker."""
    return FrontierDashboard(Grid.of(strategy=("engine",)), budget_mb=FIRST_BUDGET_MB)


def auto() -> AutoDashboard:
    """auto's recommendation for the field's deployments as free memory moves."""
    return AutoDashboard(engines=AUTO_ENGINES)
