"""``Grid``: the one grid every frontier, sweep, notebook and dashboard runs.

A grid is four frozen parts, each checked once when it is made: its plan settings
(``GridPlan``: the model, the engine releases, a DeepGEMM what-if, padded budgets, whose
temporaries are counted, the GPU), its scheduler's settings (``SchedulerSettings``: each
release's own defaults unless given), its deployment (``Deployment``: drafts, the KV cache, TP)
and its axes (``Axes``: concurrency, ISL, OSL, shared prefix, prompt lengths, strategy, budget
and free memory).  The grid is the product of its axes (a shared prefix longer than a prompt is
skipped: such a point cannot exist).  Making it checks what the parts say together (a prompt
longer than the model's max_model_len, a setting of a server the grid does not run) and derives
each release's KV cache and scheduler and each strategy's settings, once per plan and deployment:
``where`` replaces the parts a change touches, so moving an axis derives nothing again.  A bad
value raises a ValueError that names it and the rule.  Its ``tasks`` are the units a sweep runs
and journals.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, fields
from typing import ClassVar, Iterator

from ..checks import BadValue
from ..engines import get_engine, not_default
from ..engines.kv_capacity import KvCapacity
from ..plan import GIVEN_BUDGET, MEASURED_BUDGET, PlanSettings, get_strategy
from ..presets import budget_bytes_from_mb, check_within_gpu, free_bytes_from_gib, get_model
from ..workload import ClosedLoopWorkload, SchedulerConfig, check_schedule_size
from ..workload.lengths import length_bounds, mix_text, parse_mix
from .axes import Axes
from .deployment import Deployment
from .axes import default_isl
from .grid_plan import GridPlan
from .scheduler_settings import SchedulerSettings

# budget_mb of a row whose strategy reads no budget of the grid (NaN once in a DataFrame)
NO_BUDGET_MB = None

MODES = ("model", "trace", "measure")


def same_budget(a: float | None, b: float | None) -> bool:
    """budget_mb equality in which the rows without a budget (None, or NaN in a frame) are one."""
    def none(x):
        return x is None or x != x
    return a == b or (none(a) and none(b))


@dataclass(frozen=True)
class Task:
    """A unit of a sweep: one workload on one scheduler, engine and strategy, over some budgets
    (None: a strategy that reads none) and free memories."""

    model: str
    workload: ClosedLoopWorkload
    scheduler: SchedulerConfig
    engine: str
    strategy: str
    budgets_mb: tuple[float | None, ...]
    frees_gib: tuple[float, ...]
    one_budget: bool = False  # the id names its budget (trace and measure run one)
    one_free: bool = False  # the id names its free memory (measure runs one)

    @property
    def id(self) -> str:
        w, c = self.workload, self.scheduler
        parts = [self.model, f"c{w.concurrency}", f"isl{w.isl}", f"osl{w.osl}", f"prefix{w.shared_prefix}",
                 f"mnbt{c.max_num_batched_tokens}", f"seqs{c.max_num_seqs}",
                 f"thr{c.long_prefill_token_threshold}", self.engine, self.strategy]
        # mixed lengths only: a homogeneous task keeps the id it always had (journals resume)
        if w.random_range_ratio:
            parts.append(f"r{w.random_range_ratio:g}")
        if w.mix:
            parts.append(f"mix{mix_text(w.mix)}")
        if not w.homogeneous:
            parts.append(f"seed{w.seed}")
        if c.speculative_tokens:
            parts.append(f"spec{c.speculative_tokens}")
        if c.num_kv_blocks:
            parts.append(f"kvblocks{c.num_kv_blocks}")
        if c.dp != 1:
            parts.append(f"dp{c.dp}")
        if self.one_budget and self.budgets_mb[0] is not None:
            parts.append(f"budget{self.budgets_mb[0]:g}")
        if self.one_free:
            parts.append(f"free{self.frees_gib[0]:g}")
        return "|".join(parts)


@functools.lru_cache(maxsize=64)  # a dashboard's moves reuse the deployments they saw
def kv_caches(plan: GridPlan, deployment: Deployment) -> dict[str, KvCapacity | None]:
    """Each release's derived KV cache (None: a number of tokens given); a deployment a release
    cannot derive is refused before any work."""
    deployment.check_engines(plan.engine)
    return {e: deployment.kv_cache(plan.model, e, plan.gpu) for e in plan.engine}


@functools.lru_cache(maxsize=64)
def release_schedulers(plan: GridPlan, scheduler: SchedulerSettings,
                       deployment: Deployment) -> dict[str, tuple[SchedulerConfig, ...]]:
    """Each release's schedulers on the deployment; one the planners do not model is refused."""
    caches, block = kv_caches(plan, deployment), get_model(plan.model).kv_block
    out = {e: scheduler.configs(e, block, plan.gpu, deployment.speculative_tokens,
                                caches[e].tokens if caches[e] else deployment.kv_cache_tokens, deployment.dp)
           for e in plan.engine}
    for e, configs in out.items():
        for config in configs:
            why = deployment.tp_refusal(e, config)
            if why:
                raise BadValue("tp", why)
    return out


@functools.lru_cache(maxsize=64)
def strategy_runs(plan: GridPlan, strategies: tuple[str, ...]) -> dict[tuple[str, str], PlanSettings]:
    """Each strategy's settings as it runs them on each release (its layout checked on the build)."""
    return {(e, s): get_strategy(s).runs_under(plan.settings(e)) for e in plan.engine for s in strategies}


def check_axes_on(plan: GridPlan, axes: Axes) -> None:
    """The axes against the model and the GPU: no prompt past its max_model_len, no free memory or
    budget past the GPU's capacity, a point left."""
    for b in axes.budget_mb:
        check_within_gpu("budget_mb", budget_bytes_from_mb(b), plan.gpu, f"budget_mb {b:g}")
    for f in axes.free_gib:
        check_within_gpu("free_gib", free_bytes_from_gib(f), plan.gpu, f"free_gib {f:g}")
    longest = get_model(plan.model).max_model_len
    too_long = [i for i in axes.isl if i > longest]
    if too_long:
        raise BadValue("isl", f"isl {too_long[0]} > max_model_len {longest} of {plan.model}")
    too_long = [n for n in axes.mix_lengths() if n > longest]
    if too_long:
        raise BadValue("mix", f"mix length {too_long[0]} > max_model_len {longest} of {plan.model}")
    if min(axes.shared_prefix) > max(axes.isl):
        raise BadValue("shared_prefix", f"shared_prefix {min(axes.shared_prefix)} > every isl (at most "
                                        f"{max(axes.isl)}): the shared prefix is part of the prompt, "
                                        "so no point is left")
    if not any(True for _ in closed_loops(axes, longest)):
        raise BadValue("isl", "no point is left: every prompt length drawn around the isl axis "
                              f"(random_range_ratio {', '.join(f'{r:g}' for r in axes.random_range_ratio)}) is "
                              f"shorter than the shared prefix or longer than max_model_len {longest}")


def closed_loops(axes: Axes, longest: int) -> Iterator[ClosedLoopWorkload]:
    """Every client workload of the axes, skipping the points that cannot exist: a shared prefix
    longer than the shortest prompt, a prompt longer than ``longest`` (the model's max_model_len,
    which vLLM refuses) or of no token."""
    for conc, isl, osl, prefix, ratio, mix in itertools.product(
            axes.concurrency, axes.isl, axes.osl, axes.shared_prefix, axes.random_range_ratio, axes.mix):
        low, high = length_bounds(isl, ratio)
        lengths = [n for _, n in parse_mix(mix)]
        if 1 <= low and prefix <= min([low] + lengths) and max([high] + lengths) <= longest:
            yield ClosedLoopWorkload(conc, isl, osl, prefix, None, ratio, mix, axes.length_seed,
                                     warm_cache=axes.warm_cache)


@dataclass(frozen=True)
class Grid:
    """The grid: its plan settings, scheduler settings, deployment and axes (``Grid.of`` makes one
    from settings by name), with what is derived from them once."""

    plan: GridPlan = GridPlan()
    scheduler: SchedulerSettings = SchedulerSettings()
    deployment: Deployment = Deployment()
    axes: Axes = Axes()

    PARTS: ClassVar[dict[str, type]] = {"plan": GridPlan, "scheduler": SchedulerSettings,
                                        "deployment": Deployment, "axes": Axes}
    HOLDER: ClassVar[dict[str, str]] = {name: part for part, kind in PARTS.items() for name in kind.names()}

    def __post_init__(self):
        if self.axes.isl is None:
            object.__setattr__(self, "axes", self.axes.where(isl=default_isl(self.plan.model)))
        check_axes_on(self.plan, self.axes)
        object.__setattr__(self, "_kv_caches", kv_caches(self.plan, self.deployment))
        object.__setattr__(self, "_schedulers", release_schedulers(self.plan, self.scheduler, self.deployment))
        for workload in self.closed_loops():  # no schedule too long to simulate, before any is
            for config in {c for e in self.plan.engine for c in self._schedulers[e]}:
                check_schedule_size(workload, config)
        object.__setattr__(self, "_runs", strategy_runs(self.plan, self.axes.strategy))

    @classmethod
    def of(cls, **settings) -> Grid:
        """A grid from its settings by name (``model=``, ``isl=``, ``tp=``...), each given to the
        part that holds it; the others at their defaults."""
        given = cls.by_part(settings)
        return cls(**{f.name: f.default.where(**given[f.name]) for f in fields(cls)})

    def where(self, **changes) -> Grid:
        """The grid with some settings changed, by name: only the parts holding them are made (and
        checked) again, and what was derived from the others is kept."""
        given = self.by_part(changes)
        return Grid(**{name: getattr(self, name).where(**given[name]) for name in self.PARTS})

    @classmethod
    def by_part(cls, settings: dict) -> dict[str, dict]:
        """Settings by name, grouped by the part that holds each."""
        out = {name: {} for name in cls.PARTS}
        for name, value in settings.items():
            if name not in cls.HOLDER:
                raise TypeError(f"Grid has no setting {name!r}")
            out[cls.HOLDER[name]][name] = value
        return out

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        return tuple(cls.HOLDER)

    @classmethod
    def defaults(cls) -> dict:
        """Each setting's default by name."""
        return {k: v for part in cls.PARTS.values() for k, v in part.defaults().items()}

    def flat(self) -> dict:
        """Each setting's value by name (the ISL axis as derived where it was not given)."""
        return {k: v for name in self.PARTS for k, v in getattr(self, name).values().items()}

    def __getattr__(self, name: str):
        # a setting read by its name (grid.model, grid.isl): from the part that holds it
        part = self.HOLDER.get(name)
        if part is None:
            raise AttributeError(f"Grid has no setting or attribute {name!r}")
        return getattr(object.__getattribute__(self, part), name)

    def mem_fraction_static_on(self, engine: str) -> float | None:
        """SGLang's --mem-fraction-static on one of the grid's releases (None: its default, or not SGLang)."""
        return self.deployment.mem_fraction_static_on(engine)

    def deployment_not_default(self, engine: str) -> list[str]:
        """The deployment's settings on a release that are not its default, beyond the scheduler's."""
        return self.deployment.not_default(engine)

    def settings(self, engine: str) -> PlanSettings:
        """The plan settings of the grid's points on one of its engine releases."""
        return self.plan.settings(engine)

    def runs_under(self, engine: str, strategy: str) -> PlanSettings:
        """The settings as one of the grid's strategies runs them on one of its releases."""
        return self._runs[(engine, strategy)]

    def budgets(self, engine: str, strategy: str) -> tuple[float | None, ...]:
        """The budgets a strategy's rows are computed and stored for: the grid's, or one row with
        budget_mb ``NO_BUDGET_MB`` (None) for a strategy that reads none of them (planned once,
        shown once): n-only, and an engine's own chunker without a budget or with one it measures,
        or whose path for the model reads none (TensorRT-LLM's kpool path)."""
        profile = get_engine(engine)
        one_call = get_strategy(strategy).own_build and profile.one_call_for(get_model(self.plan.model))
        if get_strategy(strategy).budget_source(profile) == GIVEN_BUDGET and not one_call:
            return self.axes.budget_mb
        return (NO_BUDGET_MB,)

    def measures_budget(self, engine: str, strategy: str) -> bool:
        """Whether the strategy's budget is the one the engine measures from free memory (SGLang's
        own chunker), so that each free memory is planned on its own."""
        return get_strategy(strategy).budget_source(get_engine(engine)) == MEASURED_BUDGET

    def schedulers(self, engine: str) -> tuple[SchedulerConfig, ...]:
        """The grid's scheduler settings on one of its releases: each axis given, or the release's
        own default where the axis is None."""
        return self._schedulers[engine]

    def not_default(self, engine: str | None = None) -> str:
        """The grid's scheduler settings that differ from its releases' defaults, as one phrase for a
        title or a summary line ('' when every release runs its own defaults)."""
        engines = self.plan.engine if engine is None else (engine,)
        gpu, tp = self.plan.gpu, self.deployment.tp
        differ = [d for e in engines for c in self.schedulers(e) for d in not_default(e, c, gpu, self.kv_cache(e))]
        differ += [d for e in engines for d in self.deployment_not_default(e)]
        return "; ".join(dict.fromkeys(differ + ([f"tp={tp}"] if tp != 1 else [])))

    def kv_cache(self, engine: str) -> KvCapacity | None:
        """The KV cache ``kv_cache_tokens`` "auto" derives for one of the grid's releases (None: a
        number of tokens given)."""
        return self._kv_caches[engine]

    def kv_cache_tokens_on(self, engine: str) -> int:
        """The KV cache in tokens per GPU on one of the grid's releases (0: room for every request)."""
        derived = self.kv_cache(engine)
        return derived.tokens if derived else self.deployment.kv_cache_tokens

    def closed_loops(self) -> Iterator[ClosedLoopWorkload]:
        """Every client workload of the grid, skipping the points that cannot exist: a shared prefix
        longer than the shortest prompt, a prompt longer than the model's max_model_len (vLLM refuses
        it) or of no token."""
        return closed_loops(self.axes, get_model(self.plan.model).max_model_len)

    def tasks(self, mode: str = "model") -> Iterator[Task]:
        """The grid's tasks in order.  A model task covers every budget and free GiB of a workload
        x engine x strategy (one schedule, plans shared across budgets); a trace task one budget; a
        measure task one budget and one free GiB, so each GPU run is durable on its own.  Each release
        schedules on its own defaults where the grid gives no scheduler setting."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: must be one of {', '.join(MODES)}")
        model, frees = self.plan.model, self.axes.free_gib
        for workload in self.closed_loops():
            for engine, strategy, scheduler in ((e, s, c) for e in self.plan.engine for c in self.schedulers(e)
                                                for s in self.axes.strategy):
                budgets = self.budgets(engine, strategy)
                if mode == "model":
                    yield Task(model, workload, scheduler, engine, strategy, budgets, frees)
                elif mode == "trace":
                    for mb in budgets:
                        yield Task(model, workload, scheduler, engine, strategy, (mb,), frees, one_budget=True)
                else:
                    for mb, free in itertools.product(budgets, frees):
                        yield Task(model, workload, scheduler, engine, strategy, (mb,), (free,), True, True)

    @property
    def num_rows(self) -> int:
        n_workloads = sum(1 for _ in self.closed_loops())
        budgets = sum(len(self.budgets(e, s)) * len(self.schedulers(e))
                      for e, s in itertools.product(self.plan.engine, self.axes.strategy))
        return n_workloads * budgets * len(self.axes.free_gib)
