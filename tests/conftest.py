"""Shared by every test: what a developer's shell may set must not change results."""
from __future__ import annotations

import pytest

from indexer_lib.run.kernels.deepgemm import RULES_ENV
from indexer_lib.runmode import STRICT_FIGURES_ENV


@pytest.fixture(autouse=True)
def _no_deepgemm_rules_override(monkeypatch):
    """The DeepGEMM padding rules come from the (fake) build, not from the environment;
    a test that checks the override sets it itself."""
    monkeypatch.delenv(RULES_ENV, raising=False)


@pytest.fixture(autouse=True)
def _strict_figures(monkeypatch):
    """Every figure a test saves keeps the figure style, or the test fails naming the rule."""
    monkeypatch.setenv(STRICT_FIGURES_ENV, "1")
