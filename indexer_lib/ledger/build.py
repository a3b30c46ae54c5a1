"""A ledger from one planned step (``plan``) or from a whole run's engine steps (``deploy``).

Every figure comes from the one place its rule lives: the memory model for a step's transients
and the boot buffers, ``engines.profile_run_logits_bytes`` for the profile run's reservation,
``memory.decode`` for a decode step's logits, the caching-allocator model for the run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..fast import young_only
from ..memory import make_plan, memory_report
from ..presets import format_bytes
from ..memory.decode import decode_in_workspace, decode_logits_cols, decode_step_bytes
from ..memory.cached_fit import NOTHING, DemandCount, demand
from ..memory.events import emit_events, plan_events
from .allocator import AllocatorRun, run_allocator
from .boot import boot_events, boot_lines
from .free import FreeMemory
from .lines import Ledger, LedgerLine


def prefill_line(plan, report, step: int | None = None) -> LedgerLine:
    who = plan.engine or plan.strategy
    where = f"step {step}: " if step is not None else ""
    detail = (f"{where}{plan.batch.num_rows:,} rows x {plan.batch.num_kv_tokens:,} KV, {plan.num_chunks:,} "
              f"chunk{'s' if plan.num_chunks != 1 else ''}, largest logits {format_bytes(plan.largest_logits_bytes)}")
    return LedgerLine("prefill", "prefill step's transient peak", report.peak_transient,
                      f"memory model of {who}'s path (docs/design.md#the-memory-model)", detail)


def decode_line(plan, decode_tokens: int, max_model_len: int, step: int | None = None, drafts: int = 0,
                graph_bs: int = 0) -> LedgerLine | None:
    """The decode logits of ``decode_tokens`` rows, where the release's decode path is read (a step
    of at most ``graph_bs`` requests replays SGLang's decode CUDA graph: 0 bytes)."""
    nbytes = decode_step_bytes(plan.settings, decode_tokens, max_model_len, drafts, graph_bs) if decode_tokens > 0 \
        else None
    if nbytes is None:
        return None
    where = f"step {step}: " if step is not None else ""
    profile = plan.settings.profile
    cols = decode_logits_cols(profile, plan.settings.preset, max_model_len, drafts)
    in_workspace = decode_in_workspace(plan.settings)
    replayed = ""
    if nbytes == 0:
        replayed = (" (taken from the shared workspace the boot line sized)" if in_workspace
                    else f" (replayed in the decode CUDA graph of up to {graph_bs:,} requests: its pool's)")
    source = profile.sources["rocm_decode_workspace" if in_workspace else "decode_logits_cols"]
    return LedgerLine("decode", "decode step's paged logits", nbytes, source,
                      f"{where}{decode_tokens:,} decode tokens x {cols:,} columns fp32{replayed}")


def plan_ledger(plan, free: FreeMemory | None, max_model_len: int, topk_rows: int, budget_mb: float | None = None,
                worst_decode_tokens: int = 0, expandable: bool = False, report=None) -> Ledger:
    """The ledger of one prefill step planned under a server's settings: its boot lines, the
    step's transients, and the allocator serving that step after the boot buffers (``report``: the
    step's memory report, default the plan's own with the top-k buffer at ``topk_rows``)."""
    report = memory_report(plan, topk_rows=topk_rows) if report is None else report
    lines = boot_lines(plan, report, max_model_len, worst_decode_tokens, budget_mb)
    lines.append(prefill_line(plan, report))
    ledger, _ = _with_allocator(lines, plan.settings, free, [(0, plan_events(plan, report, "s0", persistent=False))],
                                expandable)
    return ledger


@dataclass(frozen=True)
class RunLedger:
    ledger: Ledger
    allocator: AllocatorRun
    prefill_steps: int
    decode_steps: int
    chunks: int = 0  # logits calls over the run's prefill steps (each costs a launch and its top-k)


@dataclass(frozen=True)
class ServerSizes:
    """What a server's flags size in its ledger: ``max_model_len`` (the K workspace and the decode
    logits), ``topk_rows`` (its max_num_batched_tokens), ``drafts`` per decode, the logits knob as
    set (``budget_mb``; None: the release's), the decode tokens a kpool profile run sizes for
    (min(max_num_seqs x (1 + drafts), max_num_batched_tokens)) and PyTorch's expandable segments."""

    max_model_len: int
    topk_rows: int
    drafts: int = 0
    budget_mb: float | None = None
    worst_decode_tokens: int = 0
    expandable: bool = False
    # boot lines taken from the memory free when a step runs, held apart from the steps' blocks (a
    # CUDA graph's pool, a pooled logits buffer)
    graph_lines: tuple[LedgerLine, ...] = ()
    logits_buffer: object = None  # a what-if prefill logits buffer (``plan.logits_buffer``); None: the release's
    decode_graph_bs: int = 0  # SGLang: decode steps of up to this many requests replay its decode CUDA graph


def run_ledger(steps, strategy, budget_bytes: int | None, settings, free: FreeMemory | None, sizes: ServerSizes,
               progress=None) -> RunLedger:
    """The ledger of a run: ``steps`` (the scheduler's ``ScheduledStep``s, in order) planned with
    ``strategy`` at ``budget_bytes`` under ``settings`` and the server's ``sizes``; each decoding
    request takes ``1 + drafts`` decode tokens.  Identical steps are planned once.
    ``progress(n)``: called per step."""
    # a long run plans a hundred thousand steps and keeps one record each: collections walk only
    # what the run makes, once, after what it no longer needs is gone
    with young_only():
        return _run_ledger(steps, strategy, budget_bytes, settings, free, sizes, progress)


def _run_ledger(steps, strategy, budget_bytes: int | None, settings, free: FreeMemory | None, sizes: ServerSizes,
                progress) -> RunLedger:
    walked = _walk(steps, strategy, budget_bytes, settings, sizes, progress)
    if walked.first is None:
        raise ValueError("no prefill steps: the schedule has nothing for the indexer to do")
    plan, report = walked.first
    max_model_len = sizes.max_model_len
    lines = boot_lines(plan, report, max_model_len, sizes.worst_decode_tokens, sizes.budget_mb)
    lines += sizes.graph_lines
    lines.append(prefill_line(*walked.worst_prefill))
    if walked.worst_decode is not None:
        lines.append(decode_line(plan, walked.worst_decode[1], max_model_len, walked.worst_decode[2], sizes.drafts,
                                 sizes.decode_graph_bs))
    uncounted = walked.decode_steps if walked.worst_decode is None else 0
    ledger, run = _with_allocator(lines, settings, free, walked.alloc_steps, sizes.expandable, uncounted)
    return RunLedger(ledger, run, walked.prefill_steps, walked.decode_steps, walked.chunks)


@dataclass
class _Walked:
    """What ``run_ledger`` keeps of the steps: the first prefill step's plan and report, the
    worst prefill step's (plan, report, engine step) and decode step's (bytes, decode tokens,
    engine step), each step's allocations and the counts."""

    first: tuple | None = None
    worst_prefill: tuple | None = None
    worst_decode: tuple | None = None
    alloc_steps: list = field(default_factory=list)
    prefill_steps: int = 0
    decode_steps: int = 0
    chunks: int = 0


def _walk(steps, strategy, budget_bytes: int | None, settings, sizes: ServerSizes, progress) -> _Walked:
    """Each step planned (identical steps once), its allocations in the executor's order with
    their demand on the allocator's cache (``memory.cached_fit``)."""
    max_model_len, topk_rows, drafts = sizes.max_model_len, sizes.topk_rows, sizes.drafts
    # per distinct batch: (chunks, transient peak, its events made again where replayed, their
    # demand); a repeated batch is never a new worst
    planned: dict[tuple, tuple] = {}
    decode_of: dict[int, tuple | None] = {}  # a decode step's (logits, events, demand) by its decode tokens

    def planned_step(batch) -> tuple:
        plan = make_plan(batch, strategy, budget_bytes, settings)
        if sizes.logits_buffer is not None:
            plan = sizes.logits_buffer.apply(plan)
        return plan, memory_report(plan, topk_rows=topk_rows)

    out = _Walked()
    worst = -1  # the worst prefill step's transient peak so far
    for s in steps:
        events, need = (), NOTHING
        if s.batch is not None:
            key = (s.batch.query_lens, s.batch.seq_lens)
            known = planned.get(key)
            if known is None:
                plan, report = planned_step(s.batch)
                count = DemandCount()  # the events are read as they are made, and made again where replayed
                emit_events(plan, report, "p", count.malloc, count.free, persistent=False)
                known = planned[key] = (plan.num_chunks, report.peak_transient,
                                        _Replayed(planned_step, s.batch), count.demand())
                out.first = out.first or (plan, report)
                if known[1] > worst:
                    out.worst_prefill, worst = (plan, report, s.step), known[1]
            _, _, events, need = known
            out.prefill_steps += 1
            out.chunks += known[0]
        tokens = s.num_decode * (1 + drafts)
        if tokens and out.first is not None:
            if tokens not in decode_of:
                decode_of[tokens] = _decode_events(decode_step_bytes(out.first[0].settings, tokens, max_model_len,
                                                                     drafts, sizes.decode_graph_bs))
            decode = decode_of[tokens]
            if decode is not None:
                if out.worst_decode is None or (decode[0], tokens) > out.worst_decode[:2]:
                    out.worst_decode = (decode[0], tokens, s.step)
                events = _Replayed(events.planned, events.batch, decode[1]) if s.batch is not None else decode[1]
                need = None if need is None else need.then(decode[2])
            out.decode_steps += 1
        out.alloc_steps.append((s.step, events, need))
        if progress is not None:
            progress(1)
    return out


class _Replayed:
    """A prefill step's events (``plan_events`` of ``planned(batch)``: its plan and memory report),
    then ``after``'s, made again when the allocator replays them: most steps are served from its
    cached blocks, and a long run's events or plans would fill the memory."""

    __slots__ = ("planned", "batch", "after")

    def __init__(self, planned, batch, after: tuple = ()):
        self.planned, self.batch, self.after = planned, batch, after

    def __iter__(self):
        yield from plan_events(*self.planned(self.batch), "p", persistent=False)
        yield from self.after


def _decode_events(nbytes: int | None) -> tuple | None:
    """(bytes, events, demand) of a decode step's logits; None where the release's decode path is not read."""
    if nbytes is None:
        return None
    if nbytes == 0:  # a decode CUDA graph's replay: its logits are the graph pool's
        return 0, (), NOTHING
    events = (("malloc", "decode", nbytes), ("free", "decode"))
    return nbytes, events, demand(events)


def _with_allocator(lines: list[LedgerLine], settings, free: FreeMemory | None, alloc_steps,
                    expandable: bool, uncounted_decodes: int = 0) -> tuple[Ledger, AllocatorRun]:
    """The ledger of ``lines`` with the caching allocator's line over ``alloc_steps`` after the
    boot buffers.  On a GPU that shares the host's memory (GB10) the driver fails when the host
    runs out, before PyTorch's free-and-retry can give cached segments back
    (vllm-project/vllm#55569, #58068): there the allocator has no retry, and the ledger says so."""
    unified = settings.gpu_preset.unified_memory
    run = run_allocator(boot_events(lines), alloc_steps, None if free is None else free.bytes, expandable,
                        retry=not unified)
    lines = tuple(lines) + (run.line(expandable),)
    # decode steps on a path whose decode logits are not read: a verdict that leaves them out says so
    uncounted = (f"the {uncounted_decodes:,} decode steps have no line: {settings.engine}'s decode path for "
                 f"{settings.model} is not read, so their logits are not counted",) if uncounted_decodes else ()
    if free is None:
        return Ledger(lines, assumptions=uncounted), run
    assumptions = free.assumptions + ((
        f"{settings.gpu_preset.name} shares the host's memory: the driver fails before the caching allocator can "
        "give its cached segments back and retry (vllm-project/vllm#55569), so a segment past the free memory "
        "ends the run",) if unified else ()) + uncounted
    return Ledger(lines, free.bytes, free.source, assumptions), run
