"""``auto``: the value of an engine release's own knob with the least modelled indexer time
over a workload mix and no OOM at any step, printed as a line one can deploy; next to it, what
a patched engine could do with the project's strategies (never printed as a setting).

A deploy line comes only from the release's own chunker and its own peak: two chunks' logits
alive at once, its unpadded arithmetic, its replayed path where there is one, and, below the
default setting, the profile run's smaller reservation, which the KV cache may take.

Memory comes from the memory model, time from ``timemodel.TimeModel`` (fitted
to ``data/h200/`` when measurements exist there, else the published figures);
every recommendation says which.  Everything here is modelled.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..engines import SGLANG_MEM_FRACTION_STATIC, get_engine, process_budget, profile_run_logits_bytes, release_scheduler
from ..search.worst_step import Schedule
from ..sweep.rows import worst_decode
from ..memory import make_plan, memory_report
from ..plan import GIVEN_BUDGET, PlanSettings, get_strategy, strategy_names
from ..presets import MIB, budget_bytes_from_mb, free_bytes_from_gib, get_gpu
from ..timemodel.model import TimeModel, plan_features
from ..workload import ClosedLoopWorkload, SchedulerConfig

DEFAULT_BUDGETS_MB = (32, 64, 128, 256, 512, 1024, 2048, 4096)
# SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION values auto tries for an SGLang release
DEFAULT_FRACTIONS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


class NothingFits(ValueError):
    """No candidate's worst step fits the memory free: a negative answer, not bad input (the
    command line exits 1 on it); ``candidates``: how many were weighed, ``time_source``: the
    time model's."""

    def __init__(self, message: str, candidates: int, time_source: str):
        super().__init__(message)
        self.candidates = candidates
        self.time_source = time_source


@dataclass(frozen=True)
class Candidate:
    strategy: str
    budget_mb: float
    padded: bool  # the budget counts DeepGEMM's padding (False: M x N x 4, as engines count it)
    total_ms: float  # modelled indexer time over every step of every workload
    total_chunks: int
    peak_transient_bytes: int  # worst step over the mix
    fits: bool
    engine: str | None = None  # the engine release planned on
    setting: float | None = None  # the engine's own knob (vLLM: MiB; SGLang: the free-memory fraction)
    # the release's own chunker below its default setting: its profile run reserves this much less,
    # which the KV cache may take from the memory free (``engines.profile_run_logits_bytes``)
    reservation_shortfall_bytes: int = 0
    # the worst decode step's paged logits over the mix (the ledger's decode line; 0 where the
    # release's decode path is not read): the same for every candidate, no budget splits it
    decode_bytes: int = 0
    # the modelled time's band over the mix (the spread of the published kernel checks)
    total_low_ms: float | None = None
    total_high_ms: float | None = None

    @property
    def deployable(self) -> bool:
        """The release's own chunker at a value of its own knob: a line one can deploy."""
        return get_strategy(self.strategy).own_build

    @property
    def is_default(self) -> bool:
        """The release's own chunker at its knob's default value (or with nothing to set)."""
        return self.deployable and self.setting == get_engine(self.engine).budget_default

    @property
    def band_ms(self) -> float:
        """The width of the modelled time's band (0 where none was computed)."""
        if self.total_low_ms is None or self.total_high_ms is None:
            return 0.0
        return self.total_high_ms - self.total_low_ms

    @property
    def needs_bytes(self) -> int:
        """Memory free (as measured on the release's default setting) this candidate needs: its
        worst prefill step (with what its profile run leaves unreserved) or the worst decode step."""
        return max(self.peak_transient_bytes + self.reservation_shortfall_bytes, self.decode_bytes)

    @property
    def label(self) -> str:
        if self.deployable:
            knob = "its default" if self.setting is None else get_engine(self.engine).deploy_line(self.setting)
            return f"{self.engine} at {knob}"
        return f"{self.strategy} at {self.budget_mb:g} MiB" + (f" on {self.engine}" if self.engine else "")


@dataclass(frozen=True)
class Recommendation:
    """What to deploy (``deployable``: the release's own chunker at the fastest value of its own
    knob that fits) and what a patched engine could do (``patched``: the fastest of the project's
    strategies that fits, never an engine setting).  Either is None where nothing of its kind fits."""

    free_bytes: int
    time_source: str
    candidates: tuple[Candidate, ...]
    deployable: Candidate | None
    patched: Candidate | None
    # the fastest deployable candidate where it is not the default and the default was kept: it
    # is faster by no more than its time's band
    within_band: Candidate | None = None

    @property
    def default_note(self) -> str | None:
        """Why the release's default is the line to deploy although a setting models faster."""
        f, d = self.within_band, self.deployable
        if f is None:
            return None
        return (f"the release's default kept: {f.label} models {d.total_ms - f.total_ms:.1f} ms faster, "
                f"within its time's band of {f.band_ms:.1f} ms (the published checks' spread)")

    @property
    def best(self) -> Candidate:
        """The deployable candidate, else the patched one."""
        return self.deployable or self.patched

    @property
    def margin_bytes(self) -> int:
        """Free memory left at the worst step: the distance to the OOM frontier."""
        return self.free_bytes - self.best.needs_bytes

    @property
    def deploy_line(self) -> str:
        """The line to deploy, from the release's own chunker only; or why there is none."""
        d = self.deployable
        if d is not None:
            engine = get_engine(d.engine)
            if d.setting is None:
                return f"{engine.name}: nothing to set (its own chunker fits as it is)"
            return engine.deploy_line(d.setting)
        own = [c for c in self.candidates if c.deployable]
        if not own:
            return "none: no release's own chunker among the candidates, so no setting to deploy"
        least = min(own, key=lambda c: c.needs_bytes)
        return (f"none: {least.engine}'s own chunker needs at least {least.needs_bytes / MIB:.0f} MiB "
                f"({least.label}), more than the {self.free_bytes / MIB:.0f} MiB free")

    @property
    def patched_line(self) -> str | None:
        """What a patched engine could do instead (the project's strategies), where one fits."""
        p = self.patched
        if p is None:
            return None
        return (f"a patched engine could run {p.strategy} at {p.budget_mb:g} MiB "
                f"({'padded' if p.padded else 'unpadded'} logits budget): {p.total_ms:.1f} ms, worst step "
                f"{p.peak_transient_bytes / MIB:.0f} MiB (no release's setting)")

    def summary(self) -> str:
        b = self.best
        return (f"{self.deploy_line}  # {b.label}, {b.total_chunks} chunks, "
                f"{b.total_ms:.1f} ms indexer time; worst step needs "
                f"{b.needs_bytes / MIB:.0f} MiB of {self.free_bytes / MIB:.0f} MiB free "
                f"(margin {self.margin_bytes / MIB:.0f} MiB) [{self.time_source}]")


DEFAULT_SETTINGS = PlanSettings("glm-5", "vllm", temporaries="deepgemm")


def recommend(mix: list[ClosedLoopWorkload] | list[Schedule], free_gib: float,
              settings: PlanSettings = DEFAULT_SETTINGS, scheduler: SchedulerConfig | None = None,
              strategies: tuple[str, ...] | None = None, budgets_mb: tuple[float, ...] = DEFAULT_BUDGETS_MB,
              time_model: TimeModel | None = None,
              mem_fraction_static: float | None = SGLANG_MEM_FRACTION_STATIC) -> Recommendation:
    """Evaluate every candidate over the workload mix (workloads run on ``scheduler``, default the release's own, or their
    schedules); pick the fastest that fits, of each kind.

    On an engine release (``settings.engine``): the release's own chunker at each value of its
    own knob (``engine_candidates``): the only lines one can deploy.  ``strategies``: the
    project's on the release's DeepGEMM and workspace too, shown as what a patched engine could
    do.  Without a release: every budgeted strategy of the project (or ``strategies``), and
    nothing to deploy.  ``free_gib``: the memory free at run time, on the release's default
    setting.
    """
    if not mix:
        raise ValueError("no workloads: auto needs at least one workload in the mix")
    free = free_bytes_from_gib(free_gib)  # a bad value fails before any work
    tm = (time_model or TimeModel.from_data()).for_gpu(settings.gpu)
    if scheduler is None:  # the release's own defaults
        scheduler = release_scheduler(settings.profile, settings.preset.kv_block, settings.gpu)
    schedules = [m if isinstance(m, Schedule) else Schedule.of(m, scheduler) for m in mix]
    if settings.engine is None:
        candidates = evaluate_candidates(schedules, settings, strategies, budgets_mb, tm)
    else:
        candidates = engine_candidates(schedules, settings, free, budgets_mb,
                                       DEFAULT_FRACTIONS, tm, mem_fraction_static, settings.gpu)
        if strategies:
            candidates += evaluate_candidates(schedules, settings, strategies, budgets_mb, tm)
    decode = mix_decode_bytes(schedules, settings, scheduler.speculative_tokens)
    return choose([replace(c, decode_bytes=decode) for c in candidates], free_gib, tm.source)


def mix_decode_bytes(schedules: list[Schedule], settings: PlanSettings, drafts: int) -> int:
    """The worst decode step's paged logits over the schedules (a frontier row's ``decode_bytes``,
    ``sweep.rows.worst_decode``; 0 where the release's decode path is not read)."""
    most = max(schedules, key=lambda s: s.most_decoding or 0)
    return worst_decode(most, settings, drafts)["decode_bytes"] or 0


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
    tm = (time_model or TimeModel.from_data()).for_gpu(settings.gpu)
    candidates = []
    for name in strategies or budgeted_strategies(settings):
        strategy = get_strategy(name)
        for mb in budgets_mb:
            budget = budget_bytes_from_mb(mb)
            *totals, band = _over_schedules(schedules, tm, lambda batch: make_plan(batch, strategy, budget, settings))
            candidates.append(Candidate(name, mb, settings.padded, *totals, False, settings.engine,
                                        total_low_ms=band[0], total_high_ms=band[1]))
    return candidates


def _over_schedules(schedules: list[Schedule], tm: TimeModel, plan_of,
                    peak_of=lambda plan: memory_report(plan).peak_transient) -> tuple:
    """(modelled ms, chunks, worst-step transient bytes, (low, high) ms) of ``plan_of(batch)``
    over every step of the schedules (a distinct step planned once, counted as often as it
    occurs); the last, the time's band from the published kernel checks."""
    total_ms, chunks, worst, low, high = 0.0, 0, 0, 0.0, 0.0
    for schedule in schedules:
        for batch, count in zip(schedule.unique, schedule.count):
            plan = plan_of(batch)
            t = tm.features_time(plan_features(plan))
            lo, hi = t.bounds_us()
            total_ms += t.total_us * 1e-3 * count
            low += lo * 1e-3 * count
            high += hi * 1e-3 * count
            chunks += plan.num_chunks * count
            worst = max(worst, peak_of(plan))
    return total_ms, chunks, worst, (low, high)


def _own_peak(plan) -> int:
    """A release's own chunker's transient peak; where its path is replayed (``run.replay``),
    the larger of that path's and the settings' temporaries (a deploy line errs on the safe side)."""
    peak = memory_report(plan).peak_transient
    if plan.settings.profile.path is not None:
        peak = max(peak, memory_report(plan, temporaries="replay").peak_transient)
    return peak


def engine_candidates(schedules: list[Schedule], settings: PlanSettings, free_bytes: int,
                      budgets_mb: tuple[float, ...] = DEFAULT_BUDGETS_MB,
                      fractions: tuple[float, ...] = DEFAULT_FRACTIONS,
                      time_model: TimeModel | None = None,
                      mem_fraction_static: float | None = SGLANG_MEM_FRACTION_STATIC,
                      gpu: str = "h200") -> list[Candidate]:
    """The engine release's (``settings.engine``) own chunker at each value of its own knob: vLLM's
    ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (``budgets_mb``), TensorRT-LLM's
    ``TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET`` (the same budgets as fp32 elements per call), SGLang's
    ``SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION`` (``fractions``; the budget it measures
    with ``free_bytes`` free, kept for every step), or nothing to set (no budget, or
    SGLang's fixed half of the memory free before 0.5.13)."""
    profile = get_engine(settings.profile)
    tm = (time_model or TimeModel.from_data()).for_gpu(settings.gpu)
    # TensorRT-LLM's knob counts fp32 elements per call: the same budgets, as whole elements
    elements = tuple(int(mb * MIB) // 4 for mb in budgets_mb)
    knobs = {"fixed-mib": budgets_mb, "fixed-elements": elements, "sglang-cached": fractions}.get(
        profile.budget_rule, (None,))
    compressed = settings.preset.kv_ratio != 1 and profile.compressed_budget_rule is not None
    one_call = profile.one_call_for(settings.preset)
    if one_call:
        knobs = (None,)  # its own path reads no budget: SGLang 0.5.12-0.5.20's C4, TensorRT-LLM's kpool
    total = get_gpu(gpu).capacity_bytes
    default_reservation = profile_run_logits_bytes(profile, model=settings.preset)
    candidates = []
    for setting in knobs:
        budget = (None if one_call or (setting is None and compressed) else
                  process_budget(profile, free_bytes, total, mem_fraction_static, setting, compressed=compressed,
                                 rocm=get_gpu(gpu).rocm))
        *totals, band = _over_schedules(schedules, tm, lambda batch: make_plan(batch, "engine", budget, settings),
                                        _own_peak)
        mb = float("nan") if budget is None else budget / MIB
        shortfall = max(0, default_reservation - profile_run_logits_bytes(profile, setting, settings.preset))
        candidates.append(Candidate("engine", mb, False, *totals, False, profile.name, setting, shortfall,
                                    total_low_ms=band[0], total_high_ms=band[1]))
    return candidates


def choose(candidates: list[Candidate], free_gib: float, time_source: str) -> Recommendation:
    """The fastest deployable candidate and the fastest patched one whose worst step fits in
    ``free_gib`` (ties: the larger margin to the frontier); the release's default stays the
    deployable one where it fits and the fastest beats it by no more than its time's band."""
    free = free_bytes_from_gib(free_gib)
    candidates = [replace(c, fits=c.needs_bytes <= free) for c in candidates]
    fitting = [c for c in candidates if c.fits]
    if not fitting:
        smallest = min(candidates, key=lambda c: c.needs_bytes)
        raise NothingFits(
            f"free memory {free_gib} GiB: no strategy and budget fits; the smallest worst step "
            f"needs {smallest.needs_bytes / MIB:.0f} MiB ({smallest.label})", len(candidates), time_source)

    def fastest(kind):
        return min(kind, key=lambda c: (round(c.total_ms, 6), c.needs_bytes), default=None)

    deploy, within = fastest([c for c in fitting if c.deployable]), None
    default = next((c for c in fitting if c.is_default), None)
    # a setting the model finds faster only inside its own band is no reason to leave the default
    if default is not None and deploy is not default and default.total_ms - deploy.total_ms <= deploy.band_ms:
        # named where the gain shows at the tenth of a millisecond the time is printed to
        deploy, within = default, deploy if round(default.total_ms - deploy.total_ms, 1) > 0 else None
    return Recommendation(free, time_source, tuple(candidates), deploy,
                          fastest([c for c in fitting if not c.deployable]), within)
