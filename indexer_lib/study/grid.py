"""``Grid``: the one grid every frontier, sweep, notebook and dashboard runs.

A grid is a set of plan settings (the model, a DeepGEMM what-if, padded budgets, whose
temporaries are counted, the GPU) times its axes: concurrency, ISL, OSL, shared prefix, the scheduler's
settings (each release's own defaults unless given), the engine release, the strategy, the budget
and the free memory.  Every axis is a
tuple and the grid is their product (a shared prefix longer than a prompt is skipped: such a
point cannot exist).  It is checked once, when it is made: a bad value raises a ValueError that
names it and the rule.  Its ``tasks`` are the units a sweep runs and journals.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import Iterator

from ..checks import BadValue
from ..engines import DEFAULT_ENGINE, get_engine, not_default, release_scheduler
from ..engines.budget import SGLANG_MEM_FRACTION_STATIC
from ..engines.scheduler import tp_row_shard_refusal
from ..engines.kv_capacity import KV_CACHE_DTYPES, KvCapacity, deployment_kv_cache
from ..plan import GIVEN_BUDGET, MEASURED_BUDGET, PlanSettings, get_strategy
from ..shapes import budget_bytes_from_mb, free_bytes_from_gib, get_model
from ..workload import MAX_BATCHED_TOKENS, MAX_CONCURRENCY, MAX_OSL, ClosedLoopWorkload, SchedulerConfig, check_int, check_source
from ..workload.simulator import MAX_SPECULATIVE_TOKENS
from ..workload.lengths import check_range_ratio, length_bounds, mix_text, parse_mix
from .frontier import default_isl

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
        if self.one_budget and self.budgets_mb[0] is not None:
            parts.append(f"budget{self.budgets_mb[0]:g}")
        if self.one_free:
            parts.append(f"free{self.frees_gib[0]:g}")
        return "|".join(parts)


@dataclass(frozen=True)
class Grid:
    model: str = "glm-5"
    concurrency: tuple[int, ...] = (1, 4, 8, 16, 24, 32, 48, 64)
    isl: tuple[int, ...] | None = None  # None: 2,048 up to the model's max_model_len (default_isl)
    osl: tuple[int, ...] = (64,)
    budget_mb: tuple[float, ...] = (64, 128, 256, 512, 1024, 2048)
    strategy: tuple[str, ...] = ("n-only", "vllm", "per-request", "causal")
    free_gib: tuple[float, ...] = (2.63,)
    shared_prefix: tuple[int, ...] = (0,)
    # mixed lengths (docs/design.md#mixed-lengths): vLLM bench's --random-range-ratio R (each prompt
    # drawn from ISL x [1 - R, 1 + R]) and mixes ("0.1x131072": a tenth of the prompts at 131,072
    # tokens, the rest at the ISL axis' value; "": none), drawn from ``length_seed``; each value is
    # one schedule per point.  A point whose longest prompt passes max_model_len is skipped.
    random_range_ratio: tuple[float, ...] = (0.0,)
    mix: tuple[str, ...] = ("",)
    length_seed: int = 0  # the workloads' ``seed`` (not a measure sweep's inputs', RunSettings.seed)
    # the scheduler: None, each engine release's own default (``engines.scheduler_defaults``);
    # a value given is named in every row that differs from its release's default
    max_num_batched_tokens: tuple[int, ...] | None = None
    max_num_seqs: tuple[int, ...] | None = None
    long_prefill_token_threshold: tuple[int, ...] | None = None
    async_scheduling: bool | None = None
    # the deployment: draft tokens per decode (speculative decoding, MTP; 0: none, as vLLM serves by
    # default) and the KV cache in tokens per GPU (0: room for every running request; a smaller
    # cache holds back admissions and preempts: docs/design.md#preemption)
    speculative_tokens: int = 0
    kv_cache_tokens: int | str = 0  # or "auto": derived per release (engines.kv_capacity)
    # for kv_cache_tokens "auto": vLLM's --gpu-memory-utilization (None: each release's own) and the
    # server's --kv-cache-dtype
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    # SGLang's --mem-fraction-static: it caps the logits budget SGLang measures (f x (1 - it) x the
    # GPU's memory) and, with kv_cache_tokens "auto", sizes its KV cache; None: 0.9, SGLang's own
    # choice on an H200 (named in every row that differs)
    mem_fraction_static: float | None = None
    # tensor parallelism: named where it is not 1, and it changes no step: every TP rank runs the
    # whole indexer (vLLM's Indexer builds wq_b, wk and weights_proj as ReplicatedLinear over all
    # index heads), so TP only sizes the KV cache per GPU, which kv_cache_tokens gives
    tp: int = 1
    # engine releases (ENGINE==RELEASE; a bare vllm or sglang: its latest): each plans on its own
    # DeepGEMM, workspace and layout; the ``engine`` strategy is its own chunker
    engine: tuple[str, ...] = (DEFAULT_ENGINE,)
    # None: each engine's own DeepGEMM; a version: the project's strategies on that build instead
    deepgemm_version: str | None = None
    padded: bool = True
    # whose temporaries each chunk adds: "deepgemm" (the H200 path), "reference", or None
    temporaries: str | None = "deepgemm"
    workload_source: str = "simulator"  # or "vllm": vLLM's own scheduler
    # the GPU (``data/gpus/``): each release's scheduler defaults on it, SGLang's budget cap from
    # its memory; a release whose indexer path differs on it is refused
    gpu: str = "h200"

    def __post_init__(self):
        object.__setattr__(self, "model", get_model(self.model).name)  # one spelling: GLM-5 is glm-5
        if self.isl is None:
            object.__setattr__(self, "isl", default_isl(self.model))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type.startswith("tuple") and not (value is None and f.type.endswith("None")):
                if isinstance(value, (list, tuple)):  # YAML and JSON give lists: keep the grid hashable
                    object.__setattr__(self, f.name, tuple(value))
                else:
                    object.__setattr__(self, f.name, (value,))
                if not getattr(self, f.name):
                    raise BadValue(f.name, f"{f.name} is empty: the grid needs at least one value")
        for c in self.concurrency:
            check_int("concurrency", c, 1, MAX_CONCURRENCY)
        for o in self.osl:
            check_int("osl", o, 1, MAX_OSL)
        for name, minimum, maximum in (("isl", 1, None), ("shared_prefix", 0, None),
                                       ("max_num_batched_tokens", 1, MAX_BATCHED_TOKENS),
                                       ("max_num_seqs", 1, MAX_CONCURRENCY), ("long_prefill_token_threshold", 0, None)):
            for v in getattr(self, name) or ():
                check_int(name, v, minimum, maximum)
        longest = get_model(self.model).max_model_len
        too_long = [i for i in self.isl if i > longest]
        if too_long:
            raise BadValue("isl", f"isl {too_long[0]} > max_model_len {longest} of {self.model}")
        object.__setattr__(self, "random_range_ratio", tuple(check_range_ratio(r) for r in self.random_range_ratio))
        object.__setattr__(self, "mix", tuple(mix_text(parse_mix(m)) for m in self.mix))  # one spelling each
        check_int("length_seed", self.length_seed, 0)
        check_int("speculative_tokens", self.speculative_tokens, 0, MAX_SPECULATIVE_TOKENS)
        if self.kv_cache_tokens != "auto":
            check_int("kv_cache_tokens", self.kv_cache_tokens, 0)
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise BadValue("kv_cache_dtype", f"kv_cache_dtype {self.kv_cache_dtype!r}: must be one of "
                                             f"{', '.join(KV_CACHE_DTYPES)}")
        check_int("tp", self.tp, 1, 1024)
        if self.mem_fraction_static is not None:
            m = self.mem_fraction_static
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
                raise BadValue("mem_fraction_static", f"mem_fraction_static {m!r}: must be a fraction in [0, 1] "
                                                      "(SGLang's --mem-fraction-static)")
        too_long = [n for m in self.mix for _, n in parse_mix(m) if n > longest]
        if too_long:
            raise BadValue("mix", f"mix length {too_long[0]} > max_model_len {longest} of {self.model}")
        if min(self.shared_prefix) > max(self.isl):
            raise BadValue("shared_prefix", f"shared_prefix {min(self.shared_prefix)} > every isl (at most "
                                            f"{max(self.isl)}): the shared prefix is part of the prompt, "
                                            "so no point is left")
        if not any(True for _ in self.closed_loops()):
            raise BadValue("isl", "no point is left: every prompt length drawn around the isl axis "
                                  f"(random_range_ratio {', '.join(f'{r:g}' for r in self.random_range_ratio)}) is "
                                  f"shorter than the shared prefix or longer than max_model_len {longest}")
        for b in self.budget_mb:
            budget_bytes_from_mb(b)
        for f in self.free_gib:
            free_bytes_from_gib(f)
        # one spelling of each value (64 and 64.0 are one budget): the grid's hash names its points
        object.__setattr__(self, "budget_mb", tuple(float(b) for b in self.budget_mb))
        object.__setattr__(self, "free_gib", tuple(float(f) for f in self.free_gib))
        check_source(self.workload_source)
        settings = {e: PlanSettings(self.model, e, self.deepgemm_version, self.padded, None, self.temporaries,
                                    self.gpu)
                    for e in self.engine}
        object.__setattr__(self, "gpu", next(iter(settings.values())).gpu)  # one spelling: H200 is h200
        # the releases' full names: a grid means the same whatever release is newest later
        object.__setattr__(self, "engine", tuple(dict.fromkeys(s.engine for s in settings.values())))
        object.__setattr__(self, "_settings", {s.engine: s for s in settings.values()})  # not a field
        # each release's derived KV cache, once (a deployment it cannot derive is refused before any work)
        sglang = [e for e in self.engine if get_engine(e).engine == "sglang"]
        if self.mem_fraction_static is not None and not sglang:
            raise BadValue("mem_fraction_static", "mem_fraction_static is SGLang's --mem-fraction-static: the grid "
                                                  f"has no SGLang release ({', '.join(self.engine)})")
        object.__setattr__(self, "_kv_caches", {
            e: deployment_kv_cache(self.kv_cache_tokens, self.model, e, self.gpu, self.tp, self._cache_fraction(e),
                                   self.kv_cache_dtype, self.speculative_tokens) for e in self.engine})
        for e in self.engine:
            for config in self.schedulers(e):
                why = tp_row_shard_refusal(e, config, self.tp)
                if why:
                    raise BadValue("tp", why)
        # each strategy's settings as it runs them on each release (its layout checked on the build)
        object.__setattr__(self, "_runs", {(e, s): get_strategy(s).runs_under(self.settings(e))
                                           for e in self.engine for s in self.strategy})

    def _cache_fraction(self, engine: str) -> float | None:
        """The memory fraction that sizes a release's derived KV cache: SGLang's
        mem_fraction_static (where the cache is derived), else vLLM's gpu_memory_utilization."""
        if get_engine(engine).engine == "sglang" and self.mem_fraction_static is not None:
            return self.mem_fraction_static if self.kv_cache_tokens == "auto" else None
        return self.gpu_memory_utilization

    def mem_fraction_static_on(self, engine: str) -> float | None:
        """SGLang's --mem-fraction-static on one of the grid's releases (None: its default, or not SGLang)."""
        return self.mem_fraction_static if get_engine(engine).engine == "sglang" else None

    def deployment_not_default(self, engine: str) -> list[str]:
        """The deployment's settings on a release that are not its default, beyond the scheduler's."""
        m = self.mem_fraction_static_on(engine)
        if m is None or m == SGLANG_MEM_FRACTION_STATIC:
            return []
        return [f"mem_fraction_static={m:g} (default {SGLANG_MEM_FRACTION_STATIC:g})"]

    def settings(self, engine: str) -> PlanSettings:
        """The plan settings of the grid's points on one of its engine releases."""
        return self._settings[engine]

    def runs_under(self, engine: str, strategy: str) -> PlanSettings:
        """The settings as one of the grid's strategies runs them on one of its releases."""
        return self._runs[(engine, strategy)]

    def budgets(self, engine: str, strategy: str) -> tuple[float | None, ...]:
        """The budgets a strategy's rows are computed and stored for: the grid's, or one row with
        budget_mb ``NO_BUDGET_MB`` (None) for a strategy that reads none of them (planned once,
        shown once): n-only, and an engine's own chunker without a budget or with one it measures,
        or whose path for the model reads none (TensorRT-LLM's kpool path)."""
        profile = get_engine(engine)
        one_call = get_strategy(strategy).own_build and profile.one_call_for(get_model(self.model))
        if get_strategy(strategy).budget_source(profile) == GIVEN_BUDGET and not one_call:
            return self.budget_mb
        return (NO_BUDGET_MB,)

    def measures_budget(self, engine: str, strategy: str) -> bool:
        """Whether the strategy's budget is the one the engine measures from free memory (SGLang's
        own chunker), so that each free memory is planned on its own."""
        return get_strategy(strategy).budget_source(get_engine(engine)) == MEASURED_BUDGET

    def schedulers(self, engine: str) -> tuple[SchedulerConfig, ...]:
        """The grid's scheduler settings on one of its releases: each axis given, or the release's
        own default where the axis is None."""
        block = get_model(self.model).kv_block
        return tuple(release_scheduler(engine, block, self.gpu, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                                       long_prefill_token_threshold=thr, async_scheduling=self.async_scheduling,
                                       speculative_tokens=self.speculative_tokens,
                                       kv_cache_tokens=self.kv_cache_tokens_on(engine))
                     for mnbt, seqs, thr in itertools.product(self.max_num_batched_tokens or (None,),
                                                              self.max_num_seqs or (None,),
                                                              self.long_prefill_token_threshold or (None,)))

    def not_default(self, engine: str | None = None) -> str:
        """The grid's scheduler settings that differ from its releases' defaults, as one phrase for a
        title or a summary line ('' when every release runs its own defaults)."""
        engines = self.engine if engine is None else (engine,)
        differ = [d for e in engines for c in self.schedulers(e) for d in not_default(e, c, self.gpu, self.kv_cache(e))]
        differ += [d for e in engines for d in self.deployment_not_default(e)]
        return "; ".join(dict.fromkeys(differ + ([f"tp={self.tp}"] if self.tp != 1 else [])))

    def kv_cache(self, engine: str) -> KvCapacity | None:
        """The KV cache ``kv_cache_tokens`` "auto" derives for one of the grid's releases (None: a
        number of tokens given)."""
        return self._kv_caches[engine]

    def kv_cache_tokens_on(self, engine: str) -> int:
        """The KV cache in tokens per GPU on one of the grid's releases (0: room for every request)."""
        derived = self.kv_cache(engine)
        return derived.tokens if derived else self.kv_cache_tokens

    def closed_loops(self) -> Iterator[ClosedLoopWorkload]:
        """Every client workload of the grid, skipping the points that cannot exist: a shared prefix
        longer than the shortest prompt, a prompt longer than the model's max_model_len (vLLM refuses
        it) or of no token."""
        longest = get_model(self.model).max_model_len
        for conc, isl, osl, prefix, ratio, mix in itertools.product(
                self.concurrency, self.isl, self.osl, self.shared_prefix, self.random_range_ratio, self.mix):
            low, high = length_bounds(isl, ratio)
            lengths = [n for _, n in parse_mix(mix)]
            if 1 <= low and prefix <= min([low] + lengths) and max([high] + lengths) <= longest:
                yield ClosedLoopWorkload(conc, isl, osl, prefix, None, ratio, mix, self.length_seed)

    def tasks(self, mode: str = "model") -> Iterator[Task]:
        """The grid's tasks in order.  A model task covers every budget and free GiB of a workload
        x engine x strategy (one schedule, plans shared across budgets); a trace task one budget; a
        measure task one budget and one free GiB, so each GPU run is durable on its own.  Each release
        schedules on its own defaults where the grid gives no scheduler setting."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: must be one of {', '.join(MODES)}")
        for workload in self.closed_loops():
            for engine, strategy, scheduler in ((e, s, c) for e in self.engine for c in self.schedulers(e)
                                                for s in self.strategy):
                budgets = self.budgets(engine, strategy)
                if mode == "model":
                    yield Task(self.model, workload, scheduler, engine, strategy, budgets, self.free_gib)
                elif mode == "trace":
                    for mb in budgets:
                        yield Task(self.model, workload, scheduler, engine, strategy, (mb,), self.free_gib,
                                   one_budget=True)
                else:
                    for mb, free in itertools.product(budgets, self.free_gib):
                        yield Task(self.model, workload, scheduler, engine, strategy, (mb,), (free,), True, True)

    @property
    def num_rows(self) -> int:
        n_workloads = sum(1 for _ in self.closed_loops())
        budgets = sum(len(self.budgets(e, s)) * len(self.schedulers(e))
                      for e, s in itertools.product(self.engine, self.strategy))
        return n_workloads * budgets * len(self.free_gib)
