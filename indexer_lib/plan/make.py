"""``split_step``: one step batch split into chunks by a strategy, under a set of settings."""
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


def split_step(batch: StepBatch, strategy: str | Strategy, budget_bytes: int | None,
               settings: PlanSettings = DEFAULT_SETTINGS, rank_kinds=None) -> Plan:
    """Split ``batch`` into chunks with a strategy (a name, or an object with its options): the
    plan of a model of one layer kind, or of one kind (``settings.kind``).  ``memory.make_plan``
    is the one callers use: it also plans a model whose kinds see a step differently.

    ``budget_bytes`` bounds each chunk's logits (DeepGEMM's padded bytes of the settings' build,
    unless ``settings.padded`` is False); the workspace bounds the K gathered per chunk.  On an
    engine release (``settings.engine``) the project's strategies run on its DeepGEMM build,
    workspace and layout (or on ``settings.deepgemm_version``, a what-if); the ``engine``
    strategy is the release's own chunker (default: the latest vLLM), on its own build,
    counting plain M x N x 4 bytes as the engines do.  A model whose indexer scores compressed K
    (DeepSeek-V4's C4) plans the step as it sees it: ``seq_len // ratio`` K entries per request.
    A model whose kinds see a step differently (DeepSeek-V4.1) is planned kind by kind, each
    plan ranked by ``rank_kinds`` (a plan -> bytes; ``memory.make_plan`` gives its transient peak).
    """
    s = get_strategy(strategy)
    if settings.kind is None and settings.preset.multi_kind:
        if rank_kinds is None:
            raise ValueError(f"{settings.model}'s layer kinds see a step differently: its plan is the kind "
                             "with the highest peak (memory.make_plan ranks them)")
        return _plan_kinds(batch, s, budget_bytes, settings, rank_kinds)
    batch = settings.view(batch)  # a compressed-K indexer plans the step's K in entries
    b = step_budgeting(s, s.runs_under(settings), batch, budget_bytes)
    build = ChunkBuilder(batch, b)
    s.split(batch, b, build)
    return Plan(s.name, batch, b.settings, b.budget, b.workspace, tuple(build.chunks),
                (b.stable_low, b.stable_high), s.logits_alive(b.settings))


def _plan_kinds(batch: StepBatch, s: Strategy, budget_bytes: int | None, settings: PlanSettings, rank) -> Plan:
    """A model whose kinds see the step differently (DeepSeek-V4.1: c2 on every row against K
    compressed by 2, the c1 kinds on each request's last rows): a plan per kind, each on its own
    view of the step; the one ranked highest (``rank``: the memory model's transient peak, what a
    step adds to the memory it holds, as the frontier ranks steps) is returned (the first such kind
    on a tie) with every kind's plan in ``kind_plans``."""
    plans = [split_step(batch, s, budget_bytes, settings.of_kind(k.name)) for k in settings.preset.indexing_kinds]
    peaks = [rank(p) for p in plans]
    worst = plans[peaks.index(max(peaks))]
    kinds = tuple((p.settings.kind, p) for p in plans)
    return replace(worst, layer_kind=worst.settings.kind, kind_plans=kinds)
