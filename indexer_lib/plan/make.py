"""``make_plan``: one step batch split into chunks by a strategy, under a set of settings."""
from __future__ import annotations

from dataclasses import replace

from ..workload import StepBatch, check_int
from .budgeting import Budgeting
from .builders import ChunkBuilder
from .chunks import Plan
from .settings import PlanSettings
from .strategies import Strategy, get_strategy

DEFAULT_SETTINGS = PlanSettings()


def step_budgeting(strategy: Strategy, runs: PlanSettings, batch: StepBatch, budget_bytes: int | None) -> Budgeting:
    """The budgeting of one step, checked: the budget the strategy needs (or refuses), the
    workspace (an engine without one of its own gathers the step's K).  ``runs``: the settings
    as the strategy runs them (``Strategy.runs_under``)."""
    strategy.check_budget(batch, budget_bytes, runs)
    if budget_bytes is not None and not (type(budget_bytes) is int and budget_bytes >= 1):
        budget_bytes = check_int("budget_bytes", budget_bytes, 1)  # the common case costs one test
    return Budgeting(runs, budget_bytes, runs.workspace or batch.num_kv_tokens)


def make_plan(batch: StepBatch, strategy: str | Strategy, budget_bytes: int | None,
              settings: PlanSettings = DEFAULT_SETTINGS) -> Plan:
    """Split ``batch`` into chunks with a strategy (a name, or an object with its options).

    ``budget_bytes`` bounds each chunk's logits (DeepGEMM's padded bytes of the settings' build,
    unless ``settings.padded`` is False); the workspace bounds the K gathered per chunk.  On an
    engine release (``settings.engine``) the project's strategies run on its DeepGEMM build,
    workspace and layout (or on ``settings.deepgemm_version``, a what-if); the ``engine``
    strategy is the release's own chunker (default: the latest vLLM), on its own build,
    counting plain M x N x 4 bytes as the engines do.  A model whose indexer scores compressed K
    (DeepSeek-V4's C4) plans the step as it sees it: ``seq_len // ratio`` K entries per request.
    """
    s = get_strategy(strategy)
    if settings.kind is None and settings.preset.multi_kind:
        return _plan_kinds(batch, s, budget_bytes, settings)
    batch = settings.view(batch)  # a compressed-K indexer plans the step's K in entries
    b = step_budgeting(s, s.runs_under(settings), batch, budget_bytes)
    build = ChunkBuilder(batch, b)
    s.split(batch, b, build)
    return Plan(s.name, batch, b.settings, b.budget, b.workspace, tuple(build.chunks),
                (b.stable_low, b.stable_high), s.logits_alive(b.settings))


def plan_at(batch: StepBatch, strategy: str | Strategy, budget_mb: float | None,
            settings: PlanSettings = DEFAULT_SETTINGS) -> Plan:
    """A strategy's plan at a budget in MiB (none where the strategy reads none)."""
    s = get_strategy(strategy)
    return make_plan(batch, s, s.budget_bytes(budget_mb, None, settings), settings)


# how a multi-kind plan ranks its kinds: the memory model's transient peak of each kind's plan. The
# memory model is the layer above, so it registers the measure here when imported (``set_kind_peak``;
# the package imports it, so every entry point has it)
_kind_peak = None


def set_kind_peak(peak) -> None:
    """Register the measure a multi-kind plan ranks its kinds by (a plan -> bytes)."""
    global _kind_peak
    _kind_peak = peak


def _plan_kinds(batch: StepBatch, s: Strategy, budget_bytes: int | None, settings: PlanSettings) -> Plan:
    """A model whose kinds see the step differently (DeepSeek-V4.1: c2 on every row against K
    compressed by 2, the c1 kinds on each request's last rows): a plan per kind, each on its own
    view of the step; the one with the highest modelled transient peak (what a step adds to the
    memory it holds, as the frontier ranks steps) is returned (the first such kind on a tie) with
    every kind's plan in ``kind_plans``."""
    if _kind_peak is None:
        raise RuntimeError("no transient peak to rank a multi-kind plan's kinds by: import indexer_lib.memory")
    plans = [make_plan(batch, s, budget_bytes, settings.of_kind(k.name)) for k in settings.preset.indexing_kinds]
    peaks = [_kind_peak(p) for p in plans]
    worst = plans[peaks.index(max(peaks))]
    kinds = tuple((p.settings.kind, p) for p in plans)
    return replace(worst, layer_kind=worst.settings.kind, kind_plans=kinds)
