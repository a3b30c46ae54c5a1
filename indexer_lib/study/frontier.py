"""The OOM frontier by model: scheduler simulator + planners + memory model.

For a workload (concurrency x ISL x OSL ...) the simulator yields every prefill
step; each strategy and budget plans every step; the memory model finds the
worst step.  A point is OOM when the worst step's transient bytes exceed the
memory free at run time.  Every number here is modelled, never measured.
"""
from __future__ import annotations

import itertools
import multiprocessing
import operator
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

from ..caches import PerSettings
from ..memory import SHAPE_BACKENDS, ShapesPeak, memory_report
from ..padding import get_rules
from ..plan import (SHAPE_STRATEGIES, ShapePlanner, asked_deepgemm, check_layout, check_strategy,
                    make_plan, strategy_budget_bytes)
from ..shapes import GIB, MIB, budget_bytes_from_mb, free_bytes_from_gib, get_model
from .collector import young_only
from ..engines import DEFAULT_ENGINE, get_engine, process_budget
from ..workload import (MAX_CONCURRENCY, MAX_OSL, ClosedLoopWorkload, SchedulerConfig, StepBatch, check_int,
                        check_source, scheduled_steps)


TEMPORARIES = ("deepgemm", "reference", None)


def check_grid_values(strategies, budgets_mb, frees_gib) -> None:
    """Every strategy known, every budget > 0, every free GiB >= 0 (ValueError otherwise)."""
    for s in strategies:
        check_strategy(s)
    for b in budgets_mb:
        budget_bytes_from_mb(b)
    for f in frees_gib:
        free_bytes_from_gib(f)


def check_engine_strategies(engines, strategies, deepgemm_version: str | None) -> None:
    """ValueError, before any work, for a strategy an engine's DeepGEMM cannot run (kv-split
    and fixed-shape need the full layout) or a DeepGEMM version that does not exist."""
    if deepgemm_version is not None:
        get_rules(deepgemm_version)
    for engine in engines:
        for strategy in strategies:
            check_layout(strategy, deepgemm_of(engine, deepgemm_version, strategy), engine)


def prefill_batches(workload: ClosedLoopWorkload, config: SchedulerConfig,
                    source: str = "simulator") -> list[StepBatch]:
    """The step batches the indexer's prefill path sees over the whole schedule.

    ``source``: "simulator" (built-in, fast) or "vllm" (vLLM's own scheduler;
    needs vLLM, see scripts/install_vllm.sh).
    """
    return [s.batch for s in scheduled_steps(workload, config, source) if s.batch is not None]


@dataclass(frozen=True)
class WorstStep:
    """A strategy and budget over a whole schedule, summarised by its worst step."""

    strategy: str
    budget_bytes: int | None
    worst_step: int  # engine step index of the step with the largest transient peak
    worst_rows: int  # M of that step
    worst_kv_tokens: int  # N of that step
    worst_chunks: int  # chunks that step needs
    peak_bytes: int  # persistent + transient peak of that step
    peak_transient_bytes: int
    max_chunks: int  # most chunks any step needs
    total_chunks: int  # chunks over the whole schedule
    over_budget: bool  # some chunk could not meet the budget


class Schedule:
    """A schedule's prefill steps, with identical steps grouped so each is planned once."""

    def __init__(self, batches: list[StepBatch]):
        if not batches:
            raise ValueError("no prefill steps: the schedule has nothing for the indexer to do")
        self.batches = batches
        first: dict[tuple, int] = {}
        self.unique: list[StepBatch] = []  # first occurrence of each distinct step
        self.count: list[int] = []  # how often each distinct step occurs
        for batch in batches:
            # the lengths are tuples of ints (hashed in C; the planners read them anyway)
            k = first.setdefault((batch.query_lens, batch.seq_lens), len(self.unique))
            if k == len(self.unique):
                self.unique.append(batch)
                self.count.append(0)
            self.count[k] += 1


def worst_steps(
    batches: list[StepBatch] | Schedule,
    strategy: str,
    budgets: list[int | None],
    model: str = "deepseek-v3.2",
    deepgemm_version: str | None = None,
    padded: bool = True,
    workspace_tokens: int | None = None,
    topk_rows: int | None = None,
    temporaries: str | None = "deepgemm",
    engine=None,
) -> list[WorstStep]:
    """``worst_step`` for several budgets; a step's plan is reused for every budget
    inside the interval over which the planner's decisions do not change.

    ``engine``: plan on that engine release (``make_plan(..., engine=...)``), on its own
    DeepGEMM unless ``deepgemm_version`` names another (never for the ``engine`` strategy).
    Without either: DeepGEMM 2.6 on vLLM's workspace.

    ``temporaries``: whose temporaries the memory model adds to each chunk:
    ``deepgemm`` (the H200 path that ``measure`` runs, the default),
    ``reference`` (the CPU reference executor) or None (logits and metadata only).
    """
    schedule = batches if isinstance(batches, Schedule) else Schedule(batches)
    # the same step recurs across the workloads of a grid (and a dashboard's moves): its plans are
    # kept by everything they depend on, one per budget interval
    settings = (strategy, model, deepgemm_version, padded, workspace_tokens, topk_rows, temporaries,
                None if engine is None else get_engine(engine).name)
    plan_step = _step_planner(schedule.unique[0], strategy, workspace_tokens, model,
                              asked_deepgemm(strategy, deepgemm_version), padded, engine, topk_rows, temporaries)

    planned = _STEP_PLANS.of(settings)

    def at_budgets(batch) -> list[tuple]:
        """(stable interval, chunks, transient peak, peak, over budget) of a step at each budget."""
        lengths = (batch.query_lens, batch.seq_lens)
        plans = planned.get(lengths)
        if plans is None:
            plans = _STEP_PLANS.add(planned, lengths, [])
        row, entry = [], None
        for budget in budgets:
            if entry is None or not _in_interval(budget, entry[0]):
                entry = None
                for known in plans:
                    if _in_interval(budget, known[0]):
                        entry = known
                        break
                if entry is None:
                    entry = plan_step(batch, budget)
                    plans.append(entry)
            row.append(entry)
        return row

    # per distinct step (in order of first occurrence), its entry at each budget
    steps = [at_budgets(batch) for batch in schedule.unique]
    results = []
    for i, budget in enumerate(budgets):
        column = [step[i] for step in steps]
        chunks = [e[1] for e in column]
        transients = [e[2] for e in column]
        worst = transients.index(max(transients))  # ties go to the earliest step
        batch, entry = schedule.unique[worst], column[worst]
        results.append(WorstStep(strategy, budget, batch.step, batch.num_rows, batch.num_kv_tokens,
                                 entry[1], entry[3], entry[2], max(chunks),
                                 sum(map(operator.mul, chunks, schedule.count)),
                                 any(e[4] for e in column)))
    return results


def _step_planner(first: StepBatch, strategy, workspace_tokens, model, deepgemm_version, padded, engine,
                  topk_rows, temporaries):
    """``plan_step(batch, budget)``: (stable interval, chunks, transient peak, peak, over budget) of
    one step, from the chunks' shapes (and, where two chunks' logits are alive, their neighbours')
    where their bytes depend on nothing else (no chunk records made; the settings resolved once),
    else from the whole plan."""
    if strategy in SHAPE_STRATEGIES and temporaries in SHAPE_BACKENDS:
        planner = ShapePlanner(strategy, workspace_tokens, model, deepgemm_version, padded, engine)
        peak_of = ShapesPeak(planner.record(first), backend=temporaries)

        def plan_step(batch, budget) -> tuple:
            step = planner.shapes(batch, budget)
            transient, peak = peak_of(step.shapes, step.pairs, step.workspace_tokens,
                                      batch.num_rows if topk_rows is None else topk_rows)
            return step.budget_stable, step.num_chunks, transient, peak, step.over_budget
        return plan_step

    def plan_whole(batch, budget) -> tuple:
        plan = make_plan(batch, strategy, budget, workspace_tokens, model, deepgemm_version, padded, engine=engine)
        report = memory_report(plan, topk_rows=topk_rows, backend=temporaries)
        return plan.budget_stable, plan.num_chunks, report.peak_transient, report.peak, plan.over_budget
    return plan_whole


# plan settings -> {(step query lens, seq lens): [(stable interval, chunks, transient, peak, over)]},
# one entry per budget interval planned (a grid's steps number in the thousands)
_STEP_PLANS = PerSettings(limit=200_000)


def _in_interval(budget: int | None, interval: tuple[int, int | None]) -> bool:
    low, high = interval
    if budget is None:
        return high is None
    return low <= budget and (high is None or budget < high)


def worst_step(batches: list[StepBatch] | Schedule, strategy: str, budget_bytes: int | None,
               **kwargs) -> WorstStep:
    """The step with the largest transient peak over a schedule, for one strategy and budget."""
    return worst_steps(batches, strategy, [budget_bytes], **kwargs)[0]


def check_workload_axes(concurrencies, osls) -> None:
    """ValueError, before any work, for a concurrency or OSL the simulator refuses."""
    for c in concurrencies:
        check_int("concurrency", c, 1, MAX_CONCURRENCY)
    for o in osls:
        check_int("osl", o, 1, MAX_OSL)


def check_isl(model: str, isls) -> None:
    """ValueError for a prompt longer than the model serves."""
    max_len = get_model(model).max_model_len
    too_long = [i for i in isls if i > max_len]
    if too_long:
        raise ValueError(f"isl {too_long[0]} > max_model_len {max_len} of {model}")


# the default ISL axis below a model's max_model_len: the reported failures' 10,240, then
# powers of two up to 128K (docs/design.md#long-contexts)
ISL_STEPS = (2048, 4096, 8192, 10240, 16384, 32768, 65536, 131072)


def default_isl(model: str) -> tuple[int, ...]:
    """The default ISL axis of a model's grids: 2,048 up to its ``max_model_len`` (GLM-5 202,752,
    DeepSeek-V3.2 163,840), where the budgeted strategies' frontiers part."""
    longest = get_model(model).max_model_len
    return tuple(i for i in ISL_STEPS if i < longest) + (longest,)


@dataclass(frozen=True)
class FrontierGrid:
    model: str = "glm-5"
    concurrency: tuple[int, ...] = (1, 4, 8, 16, 24, 32, 48, 64)
    isl: tuple[int, ...] | None = None  # None: default_isl(model), 2,048 up to max_model_len
    osl: int = 64
    budget_mb: tuple[float, ...] = (64, 128, 256, 512, 1024, 2048)
    strategy: tuple[str, ...] = ("n-only", "vllm", "per-request", "causal")
    free_gib: tuple[float, ...] = (2.63,)
    shared_prefix: int = 0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    long_prefill_token_threshold: int = 256
    # None: the engine's own DeepGEMM; a version: the project's strategies on that build instead
    deepgemm_version: str | None = None
    padded: bool = True
    workload_source: str = "simulator"  # or "vllm": vLLM's own scheduler
    # whose temporaries each chunk adds: "deepgemm" (the H200 path), "reference", or None
    temporaries: str | None = "deepgemm"
    # plan on this engine release (its DeepGEMM, workspace, layout; the ``engine`` strategy:
    # its own chunker at each budget, or at the budget it measures with the free memory);
    # default: the latest vLLM
    engine: str = DEFAULT_ENGINE

    def __post_init__(self):
        get_model(self.model)
        if self.isl is None:
            object.__setattr__(self, "isl", default_isl(self.model))
        check_source(self.workload_source)
        if self.temporaries not in TEMPORARIES:
            raise ValueError(f"temporaries {self.temporaries!r}: must be one of "
                             f"{', '.join(str(t) for t in TEMPORARIES)}")
        check_grid_values(self.strategy, self.budget_mb, self.free_gib)
        object.__setattr__(self, "engine", get_engine(self.engine).name)
        check_engine_strategies((self.engine,), self.strategy, self.deepgemm_version)
        for name in ("concurrency", "isl", "budget_mb", "strategy", "free_gib"):
            if not getattr(self, name):
                raise ValueError(f"{name} is empty: the grid needs at least one value")
        check_workload_axes(self.concurrency, (self.osl,))
        check_isl(self.model, self.isl)

    @property
    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            block_size=get_model(self.model).kv_block,
        )

    @property
    def num_points(self) -> int:
        budgets = sum(len(grid_budgets(self.budget_mb, self.engine, s)) for s in self.strategy)
        return len(self.concurrency) * len(self.isl) * budgets * len(self.free_gib)


def workload_rows(grid: FrontierGrid, conc: int, isl: int) -> list[dict]:
    """The rows of one workload (concurrency x ISL): every budget, strategy and free GiB."""
    with young_only():  # the plans kept for the grid's other workloads are not walked again
        return _workload_rows(grid, conc, isl)


def _workload_rows(grid: FrontierGrid, conc: int, isl: int) -> list[dict]:
    workload = ClosedLoopWorkload(conc, isl, grid.osl, grid.shared_prefix)
    batches = Schedule(prefill_batches(workload, grid.scheduler, grid.workload_source))
    rows = []
    for strategy in grid.strategy:
        # the grid's budgets serve every free GiB, unless the engine measures its own from free memory
        measured = measured_budget(grid.engine, strategy)
        budgets_mb = grid_budgets(grid.budget_mb, grid.engine, strategy)
        for frees in ([(f,) for f in grid.free_gib] if measured else [grid.free_gib]):
            budgets = [budget_of(grid.engine, strategy, b, frees[0]) for b in budgets_mb]
            outcomes = worst_steps(batches, strategy, budgets, grid.model,
                                   grid.deepgemm_version, grid.padded,
                                   topk_rows=grid.max_num_batched_tokens,
                                   temporaries=grid.temporaries, engine=grid.engine)
            for budget_mb, outcome in zip(budgets_mb, outcomes):
                for free in frees:
                    rows.append(frontier_row(grid, conc, isl, budget_mb, free, outcome, strategy))
    return rows


# budget_mb of a row whose strategy reads no budget of the grid (NaN once in a DataFrame)
NO_BUDGET_MB = None


def same_budget(a: float | None, b: float | None) -> bool:
    """budget_mb equality in which the rows without a budget (None, or NaN in a frame) are one."""
    def none(x):
        return x is None or x != x
    return a == b or (none(a) and none(b))


def reads_budget_mb(engine, strategy: str) -> bool:
    """Whether a strategy plans with the grid's budget_mb: n-only has no budget, and an engine's
    own chunker may have none or measure its own from free memory."""
    return not measured_budget(engine, strategy) and strategy_budget_bytes(strategy, 1.0, engine) is not None


def grid_budgets(budgets_mb, engine, strategy: str) -> tuple[float, ...]:
    """The budgets a strategy's rows are computed and stored for: the grid's, or one row with
    budget_mb ``NO_BUDGET_MB`` (None) for a strategy that reads none of them (planned once,
    shown once)."""
    return tuple(budgets_mb) if reads_budget_mb(engine, strategy) else (NO_BUDGET_MB,)


def measured_budget(engine, strategy: str) -> bool:
    """Whether the strategy's budget is the one the engine measures from free memory (SGLang's
    own chunker), rather than the grid's budget_mb."""
    return strategy == "engine" and get_engine(engine).budget_rule.startswith("sglang")


def budget_of(engine, strategy: str, budget_mb: float, free_gib: float) -> int | None:
    """The logits budget a strategy plans with at one point of a grid (None: no budget)."""
    if measured_budget(engine, strategy):
        return process_budget(engine, free_bytes_from_gib(free_gib))
    return strategy_budget_bytes(strategy, budget_mb, engine)


def frontier_rows(grid: FrontierGrid, progress=None, workers: int | None = 1, executor: str = "local",
                  address: str | None = None):
    """Yield one tidy row per concurrency x ISL x budget x strategy x free GiB.

    ``progress``: an optional callable taking the number of workloads done.
    ``workers``: processes to spread the workloads over (None: one per CPU);
    ``executor="ray"``: the workloads on the Ray cluster at ``address`` instead
    (``study.cluster``); the rows come out in the same order whatever runs them.
    """
    workloads = list(itertools.product(grid.concurrency, grid.isl))
    if executor == "ray":
        from .cluster import ordered_map

        for rows in ordered_map(workload_rows, ((grid, conc, isl) for conc, isl in workloads), address,
                                batch=1):  # a workload is a whole schedule: already a sizeable task
            yield from rows
            if progress:
                progress(1)
        return
    if executor != "local":
        raise ValueError(f"executor {executor!r}: must be one of local, ray")
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(workers, len(workloads)))
    if workers == 1:
        for conc, isl in workloads:
            yield from workload_rows(grid, conc, isl)
            if progress:
                progress(1)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(workload_rows, grid, conc, isl) for conc, isl in workloads]
        for future in futures:
            yield from future.result()
            if progress:
                progress(1)


def frontier_row(grid: FrontierGrid, conc: int, isl: int, budget_mb: float, free_gib: float,
                 w: WorstStep, strategy: str | None = None) -> dict:
    free = free_bytes_from_gib(free_gib)
    engine = get_engine(grid.engine)
    row = {
        "mode": "model",
        "model": grid.model,
        "engine": engine.name,
        "concurrency": conc,
        "isl": isl,
        "osl": grid.osl,
        "shared_prefix": grid.shared_prefix,
        "max_num_batched_tokens": grid.max_num_batched_tokens,
        "long_prefill_token_threshold": grid.long_prefill_token_threshold,
        "deepgemm_version": deepgemm_of(engine, grid.deepgemm_version, strategy),
        "padded_budget": grid.padded and strategy != "engine",
        "workload_source": grid.workload_source,
        "temporaries": grid.temporaries or "none",
        "budget_mb": budget_mb,
        "free_gib": free_gib,
    }
    row.update(asdict(w))
    row["budget_bytes"] = w.budget_bytes if w.budget_bytes is not None else -1
    row["oom"] = w.peak_transient_bytes > free
    row["peak_transient_gib"] = w.peak_transient_bytes / GIB
    return row


def deepgemm_of(engine, deepgemm_version: str | None, strategy: str | None) -> str:
    """The DeepGEMM rules a strategy plans with on an engine: the engine's own, unless
    another version is asked for (never for the ``engine`` strategy)."""
    return asked_deepgemm(strategy, deepgemm_version) or get_engine(engine).deepgemm_rules


def format_bytes(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"
