"""``auto``: the strategy and budget with the least modelled indexer time over a
workload mix, with no OOM at any step, printed as a line one can deploy.

Memory comes from the memory model, time from ``timemodel.TimeModel`` (fitted
to ``data/h200/`` when measurements exist there, else the published figures);
every recommendation says which.  Everything here is modelled.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..engines import SGLANG_MEM_FRACTION_STATIC, get_engine, process_budget
from .frontier import Schedule, prefill_batches
from ..memory import memory_report
from ..plan import GIVEN_BUDGET, PlanSettings, get_strategy, make_plan, strategy_names
from ..shapes import MIB, budget_bytes_from_mb, free_bytes_from_gib, get_gpu
from .timemodel import TimeModel, plan_features
from ..workload import ClosedLoopWorkload, SchedulerConfig

DEFAULT_BUDGETS_MB = (32, 64, 128, 256, 512, 1024, 2048, 4096)
# SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION values auto tries for an SGLang release
DEFAULT_FRACTIONS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


@dataclass(frozen=True)
class Candidate:
    strategy: str
    budget_mb: float
    padded: bool  # False: vLLM's own unpadded arithmetic, as deployed
    total_ms: float  # modelled indexer time over every step of every workload
    total_chunks: int
    peak_transient_bytes: int  # worst step over the mix
    fits: bool
    engine: str | None = None  # the engine release planned on
    setting: float | None = None  # the engine's own knob (vLLM: MiB; SGLang: the free-memory fraction)

    @property
    def label(self) -> str:
        if get_strategy(self.strategy).own_build:
            knob = "its default" if self.setting is None else f"{get_engine(self.engine).budget_env}={self.setting:g}"
            return f"{self.engine} at {knob}"
        return f"{self.strategy} at {self.budget_mb:g} MiB" + (f" on {self.engine}" if self.engine else "")


@dataclass(frozen=True)
class Recommendation:
    best: Candidate
    free_bytes: int
    time_source: str
    candidates: tuple[Candidate, ...]

    @property
    def margin_bytes(self) -> int:
        """Free memory left at the worst step: the distance to the OOM frontier."""
        return self.free_bytes - self.best.peak_transient_bytes

    @property
    def deploy_line(self) -> str:
        b = self.best
        strategy = get_strategy(b.strategy)
        if strategy.own_build:
            engine = get_engine(b.engine)
            if b.setting is None:
                return f"{engine.name}: no logits budget to set (upgrade to a release with one to bound it)"
            return engine.deploy_line(b.setting)
        knob = strategy.deployed_by
        if knob is not None and not b.padded and (b.engine is None or get_engine(b.engine).budget_env == knob):
            return f"{knob}={b.budget_mb:g}"
        on = f" on {b.engine}" if b.engine else ""
        return (f"indexer-lab strategy={b.strategy} budget_mb={b.budget_mb:g} "
                f"({'padded' if b.padded else 'unpadded'} logits budget){on}")

    def summary(self) -> str:
        b = self.best
        return (f"{self.deploy_line}  # {b.strategy}, {b.total_chunks} chunks, "
                f"{b.total_ms:.1f} ms indexer time; worst step "
                f"{b.peak_transient_bytes / MIB:.0f} MiB of {self.free_bytes / MIB:.0f} MiB free "
                f"(margin {self.margin_bytes / MIB:.0f} MiB) [{self.time_source}]")


DEFAULT_SETTINGS = PlanSettings("glm-5", "vllm", temporaries="deepgemm")


def recommend(mix: list[ClosedLoopWorkload] | list[Schedule], free_gib: float,
              settings: PlanSettings = DEFAULT_SETTINGS, scheduler: SchedulerConfig | None = None,
              strategies: tuple[str, ...] | None = None, budgets_mb: tuple[float, ...] = DEFAULT_BUDGETS_MB,
              time_model: TimeModel | None = None,
              mem_fraction_static: float | None = SGLANG_MEM_FRACTION_STATIC) -> Recommendation:
    """Evaluate every strategy x budget over the workload mix (workloads run on ``scheduler``, or
    their schedules); pick the fastest that fits.

    On an engine release (``settings.engine``): the release's own chunker at each value of its
    own knob (``engine_candidates``), and ``strategies`` on its DeepGEMM and workspace.  Without
    one: every budgeted strategy of the project (or ``strategies``).  A strategy an engine deploys
    through a knob of its own (``vllm``: ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB``) is evaluated as
    deployed, with the engine's unpadded arithmetic; the others budget with DeepGEMM's padding.
    """
    if not mix:
        raise ValueError("no workloads: auto needs at least one workload in the mix")
    free_bytes_from_gib(free_gib)  # a bad value fails before any work
    tm = time_model or TimeModel.from_data()
    if scheduler is None:
        scheduler = SchedulerConfig(block_size=settings.preset.kv_block)
    schedules = [m if isinstance(m, Schedule) else Schedule(prefill_batches(m, scheduler)) for m in mix]
    if settings.engine is None:
        candidates = evaluate_candidates(schedules, settings, strategies, budgets_mb, tm)
    else:
        candidates = engine_candidates(schedules, settings, free_bytes_from_gib(free_gib), budgets_mb,
                                       DEFAULT_FRACTIONS, tm, mem_fraction_static)
        if strategies:
            candidates += evaluate_candidates(schedules, settings, strategies, budgets_mb, tm)
    return choose(candidates, free_gib, tm.source)


def budgeted_strategies(settings: PlanSettings) -> tuple[str, ...]:
    """The project's strategies that read a budget and whose layout the settings' build has."""
    out = []
    for name in strategy_names("field", "beyond"):
        strategy = get_strategy(name)
        if strategy.budget_source(None) == GIVEN_BUDGET and (settings.rules.full_width or not strategy.needs_full_layout):
            out.append(name)
    return tuple(out)


def evaluate_candidates(schedules: list[Schedule], settings: PlanSettings = DEFAULT_SETTINGS,
                        strategies: tuple[str, ...] | None = None,
                        budgets_mb: tuple[float, ...] = DEFAULT_BUDGETS_MB,
                        time_model: TimeModel | None = None) -> list[Candidate]:
    """Every strategy x budget over the schedules: modelled time, chunks and worst-step
    bytes.  Independent of the free memory (``fits`` is filled in by ``choose``), so one
    evaluation serves every free-memory level.  ``settings.temporaries``: whose per-chunk
    temporaries the memory model adds (default: the H200 path's, as the frontier)."""
    tm = time_model or TimeModel.from_data()
    candidates = []
    for name in strategies or budgeted_strategies(settings):
        strategy = get_strategy(name)
        on = settings.where(padded=strategy.deployed_by is None)  # deployed: the engine's arithmetic
        for mb in budgets_mb:
            budget = budget_bytes_from_mb(mb)
            totals = _over_schedules(schedules, tm, lambda batch: make_plan(batch, strategy, budget, on))
            candidates.append(Candidate(name, mb, on.padded, *totals, False, settings.engine))
    return candidates


def _over_schedules(schedules: list[Schedule], tm: TimeModel, plan_of) -> tuple[float, int, int]:
    """(modelled ms, chunks, worst-step transient bytes) of ``plan_of(batch)`` over every
    step of the schedules (a distinct step planned once, counted as often as it occurs)."""
    total_ms, chunks, worst = 0.0, 0, 0
    for schedule in schedules:
        for batch, count in zip(schedule.unique, schedule.count):
            plan = plan_of(batch)
            total_ms += tm.features_ms(plan_features(plan)) * count
            chunks += plan.num_chunks * count
            worst = max(worst, memory_report(plan).peak_transient)
    return total_ms, chunks, worst


def engine_candidates(schedules: list[Schedule], settings: PlanSettings, free_bytes: int,
                      budgets_mb: tuple[float, ...] = DEFAULT_BUDGETS_MB,
                      fractions: tuple[float, ...] = DEFAULT_FRACTIONS,
                      time_model: TimeModel | None = None,
                      mem_fraction_static: float | None = SGLANG_MEM_FRACTION_STATIC,
                      gpu: str = "h200") -> list[Candidate]:
    """The engine release's (``settings.engine``) own chunker at each value of its own knob: vLLM's
    ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (``budgets_mb``), SGLang's
    ``SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION`` (``fractions``; the budget it measures
    with ``free_bytes`` free, kept for every step), or nothing to set (no budget, or
    SGLang's fixed half of the memory free before 0.5.13)."""
    profile = get_engine(settings.profile)
    tm = time_model or TimeModel.from_data()
    knobs = {"fixed-mib": budgets_mb, "sglang-cached": fractions}.get(profile.budget_rule, (None,))
    total = get_gpu(gpu).capacity_bytes
    candidates = []
    for setting in knobs:
        budget = process_budget(profile, free_bytes, total, mem_fraction_static, setting)
        totals = _over_schedules(schedules, tm, lambda batch: make_plan(batch, "engine", budget, settings))
        mb = float("nan") if budget is None else budget / MIB
        candidates.append(Candidate("engine", mb, False, *totals, False, profile.name, setting))
    return candidates


def choose(candidates: list[Candidate], free_gib: float, time_source: str) -> Recommendation:
    """The fastest candidate whose worst step fits in ``free_gib``."""
    free = free_bytes_from_gib(free_gib)
    candidates = [replace(c, fits=c.peak_transient_bytes <= free) for c in candidates]
    fitting = [c for c in candidates if c.fits]
    if not fitting:
        smallest = min(candidates, key=lambda c: c.peak_transient_bytes)
        raise ValueError(
            f"free memory {free_gib} GiB: no strategy and budget fits; the smallest worst step "
            f"needs {smallest.peak_transient_bytes / MIB:.0f} MiB ({smallest.label})")
    # least time; ties: the larger margin to the frontier
    best = min(fitting, key=lambda c: (round(c.total_ms, 6), c.peak_transient_bytes))
    return Recommendation(best, free, time_source, tuple(candidates))
