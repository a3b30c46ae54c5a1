"""A deployment's ledger from the server's flags and a workload (``indexer-lab deploy``, and the
public reports ``reproduce`` holds): the release's scheduler under those flags, the free memory
they leave, the logits budget the release plans with, then ``run_ledger`` over the schedule."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..checks import BadValue
from ..padding import align
from ..engines import decode_graph_max_bs, process_budget, release_scheduler
from ..engines.dp_attention import check_dp
from ..engines.kv_capacity import KvCapacity, deployment_kv_cache
from ..engines.scheduler import not_default_text, scheduler_defaults, tp_row_shard_refusal
from ..fast import young_only
from ..plan import PlanSettings, get_strategy
from ..plan.strategies import NO_BUDGET
from ..presets import GIB, budget_bytes_from_mb, check_within_gpu, free_bytes_from_gib
from ..workload import ClosedLoopWorkload, SchedulerConfig
from ..workload.sources import scheduled_steps
from .boot import decode_graph_line, prefill_graph_line
from .buffers import buffer_refusal, buffer_text, what_if_buffer
from .build import RunLedger, ServerSizes, run_ledger
from .free import FreeMemory, given_free, server_free


@dataclass(frozen=True)
class Server:
    """A server's flags as it was started (None: the release's default)."""

    model: str
    engine: str | None = None
    gpu: str = "h200"
    tp: int = 1
    gpu_memory_utilization: float | None = None  # vLLM
    mem_fraction_static: float | None = None  # SGLang
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    long_prefill_token_threshold: int | None = None
    async_scheduling: bool | None = None
    speculative_tokens: int = 0
    kv_cache_tokens: int | str = 0  # 0: room for every running request; "auto": derived
    kv_cache_dtype: str = "auto"
    budget_mb: float | None = None  # vLLM's VLLM_SPARSE_INDEXER_MAX_LOGITS_MB; a strategy's budget
    expandable_segments: bool = False
    indexer_tp_shard_min_rows: int | None = None
    workspace_tokens: int | None = None  # the K workspace (tokens, or entries of compressed K); None: the release's
    # SGLang: --cuda-graph-backend-prefill breakable (off by default for DeepSeek-V4), and
    # --cuda-graph-prefill-max-context (None: the model's context)
    cuda_graph_prefill: bool = False
    cuda_graph_prefill_max_context: int | None = None
    dp: int = 1  # SGLang: DP attention ranks (--dp-size with --enable-dp-attention); one is planned
    logits_buffer: str | None = None  # a what-if prefill logits buffer (``plan.logits_buffer.KINDS``); None: none
    # the release's own logits knob where it is not vLLM's (budget_mb): SGLang's free-memory fraction,
    # TensorRT-LLM's elements per call, ATOM's MiB; None: the release's default
    knob: float | None = None


@dataclass(frozen=True)
class Deployed:
    run: RunLedger
    settings: PlanSettings
    scheduler: SchedulerConfig
    kv: KvCapacity | None
    free: FreeMemory
    budget_bytes: int | None
    max_model_len: int
    not_default: str  # the settings that differ from the release's, named wherever a number is shown

    @property
    def boot_kv_tokens(self) -> int | None:
        return self.run.ledger.boot_bytes // self.kv.bytes_per_token if self.kv is not None else None


def deployment_ledger(server: Server, workload: ClosedLoopWorkload, strategy: str = "engine",
                      free_gib: float | None = None, progress=None) -> Deployed:
    """The run's ledger; ``free_gib``: the memory free when a step runs as given (else derived
    from the server's flags).  BadValue names a flag that does not fit the release or the model."""
    settings = PlanSettings(server.model, server.engine, temporaries="deepgemm", gpu=server.gpu)
    profile, model = settings.profile, settings.preset
    max_model_len = model.max_model_len if server.max_model_len is None else server.max_model_len
    if not 1 <= max_model_len <= model.max_model_len:
        raise BadValue("max_model_len", f"max_model_len {max_model_len}: must be in [1, {model.max_model_len}] "
                                        f"({model.name}'s)")
    if workload.max_prompt_len + workload.osl > max_model_len:
        raise BadValue("workload", f"workload {workload.concurrency}x{workload.isl}x{workload.osl}: prompts of up to "
                                   f"{workload.max_prompt_len} tokens plus {workload.osl} output tokens, past "
                                   f"max_model_len {max_model_len}: the server refuses them")
    tokens = settings.workspace_at(max_model_len) if server.workspace_tokens is None else server.workspace_tokens
    if tokens is not None:
        settings = settings.where(workspace_tokens=tokens)
    if server.mem_fraction_static is not None and profile.engine != "sglang":
        raise BadValue("mem_fraction_static", f"mem_fraction_static is SGLang's: {profile.name} is not SGLang")
    if server.gpu_memory_utilization is not None and profile.engine != "vllm":
        raise BadValue("gpu_memory_utilization", f"gpu_memory_utilization is vLLM's: {profile.name} is not vLLM")
    if server.budget_mb is not None:
        check_within_gpu("budget_mb", budget_bytes_from_mb(server.budget_mb), settings.gpu,
                         f"budget_mb {server.budget_mb:g}")
    chosen = get_strategy(strategy)
    check_dp(profile, server.tp, server.dp, server.kv_cache_tokens == "auto")
    # the memory fraction sizes the KV cache only where it is derived; it always sizes the free memory
    derived = server.kv_cache_tokens == "auto"
    share = server.mem_fraction_static if profile.engine == "sglang" else server.gpu_memory_utilization
    kv = deployment_kv_cache(server.kv_cache_tokens, model.name, profile, settings.gpu, server.tp,
                             share if derived else None, server.kv_cache_dtype if derived else "auto",
                             server.speculative_tokens)
    scheduler = release_scheduler(profile, model.kv_block, settings.gpu,
                                  kv.tokens if kv is not None else server.kv_cache_tokens, server.dp,
                                  max_num_batched_tokens=server.max_num_batched_tokens,
                                  max_num_seqs=server.max_num_seqs,
                                  long_prefill_token_threshold=server.long_prefill_token_threshold,
                                  async_scheduling=server.async_scheduling,
                                  speculative_tokens=server.speculative_tokens)
    why = tp_row_shard_refusal(profile, scheduler, server.tp, server.indexer_tp_shard_min_rows)
    if why:
        raise BadValue("tp", f"tp {server.tp}: {why}")
    differs = [not_default_text(profile, scheduler, settings.gpu, kv)]
    differs += [f"{name} {value:g}" for name, value in (("gpu_memory_utilization", server.gpu_memory_utilization),
                                                        ("mem_fraction_static", server.mem_fraction_static))
                if value is not None]
    differs += [f"tp={server.tp}"] if server.tp != 1 else []
    differs += [f"workspace_tokens={server.workspace_tokens} (the release's: {settings.workspace_at(max_model_len)})"
                ] if server.workspace_tokens is not None else []
    differs += ["expandable_segments on (PyTorch's default: off)"] if server.expandable_segments else []
    drafts, worst_decode = server.speculative_tokens, scheduler.most_decode_tokens
    knob = server.budget_mb if chosen.own_build and profile.engine == "vllm" else None
    differs += _knob_text(knob, server.knob, profile, chosen)
    if free_gib is not None:
        check_within_gpu("free_gib", free_bytes_from_gib(free_gib), settings.gpu, f"free_gib {free_gib:g}")
        free = given_free(free_gib)
    else:
        free = server_free(settings, knob, worst_decode, max_model_len, server.gpu_memory_utilization,
                           server.mem_fraction_static)
    graph = _prefill_graph(server, settings, scheduler, max_model_len)
    if graph is not None:
        differs.append("--cuda-graph-backend-prefill breakable (SGLang's default for DeepSeek-V4: off)"
                       + (f", --cuda-graph-prefill-max-context {server.cuda_graph_prefill_max_context}"
                          if server.cuda_graph_prefill_max_context is not None else ""))
        # the graph pool lies outside --mem-fraction-static: it takes the free memory
        free = _held_apart(free, free_gib, graph, "the prefill CUDA graph's pool")
    decode_graph, graph_bs, free = _decode_graph(settings, server.tp, scheduler, max_model_len, free, free_gib)
    budget = _budget(chosen, settings, server, free.bytes)
    buffer, pool = what_if_buffer(server.logits_buffer, chosen, settings, budget, max_model_len)
    boot_apart = tuple(line for line in (graph, decode_graph, pool) if line is not None)
    differs += [buffer_text(buffer)] if buffer is not None else []
    free = _held_apart(free, free_gib, pool, "the pooled logits buffer")  # allocated beyond what the KV cache left
    steps = _schedule(workload, scheduler)
    if progress is not None:
        progress.total = len(steps)
    sizes = ServerSizes(max_model_len, scheduler.max_num_batched_tokens, drafts, knob, worst_decode,
                        server.expandable_segments, boot_apart, buffer, decode_graph_bs=graph_bs)
    run = run_ledger(steps, chosen, budget, settings, free, sizes, None if progress is None else progress.update)
    return Deployed(run, settings, scheduler, kv, free, budget, max_model_len, "; ".join(filter(None, differs)))


def _knob_text(vllm_knob: float | None, knob: float | None, profile, strategy) -> list[str]:
    """The release's own logits knob as set (vLLM's budget_mb, or ``knob``), named; BadValue where
    ``knob`` is given to a run that has no such knob."""
    if knob is None:
        return [] if vllm_knob is None else [f"{profile.budget_env}={vllm_knob:g} (default {profile.budget_default:g})"]
    if profile.engine == "vllm" or not strategy.own_build or profile.budget_env is None:
        raise BadValue("knob", f"knob {knob:g}: the logits knob of SGLang, TensorRT-LLM or ATOM's own chunker "
                               f"({profile.name}, strategy {strategy.name}: "
                               f"{'give budget_mb' if profile.engine == 'vllm' else 'none to set'})")
    return [f"{profile.deploy_line(knob)} (default {profile.deploy_line(profile.budget_default)})"]


def _held_apart(free: FreeMemory, free_gib: float | None, line, what: str) -> FreeMemory:
    """The free memory less a boot line held apart from the steps' blocks (None: as it is), where
    it is derived from the server's flags (a given ``free_gib`` is the memory free as given)."""
    if line is None or free_gib is not None:
        return free
    return replace(free, bytes=free.bytes - line.bytes,
                   source=f"{free.source} - {line.bytes / GIB:.2f} GiB {what} holds")


def _schedule(workload: ClosedLoopWorkload, scheduler: SchedulerConfig) -> list:
    """The scheduler's steps, listed without cyclic collections: a long run's are a hundred thousand."""
    with young_only():
        return list(scheduled_steps(workload, scheduler))


def _decode_graph(settings, tp: int, scheduler, max_model_len: int, free: FreeMemory, free_gib: float | None):
    """(its boot line, the largest batch it captures, the free memory less its pool, as the prefill
    graph's) of SGLang's decode CUDA graph, on by default; (None, 0, ``free``) where the release's
    decode graph or decode path is not read."""
    max_bs = decode_graph_max_bs(settings.profile, settings.gpu, tp, scheduler.max_num_seqs)
    line = decode_graph_line(settings, max_bs, max_model_len, scheduler.speculative_tokens) if max_bs else None
    if line is None:
        return None, 0, free
    return line, max_bs, _held_apart(free, free_gib, line, "the decode CUDA graph's pool")


def _prefill_graph(server: Server, settings, scheduler, max_model_len: int):
    """The boot line of SGLang's prefill CUDA graph where the server turns it on (None: off); BadValue
    where the release or the model has no such graph, or the bound is past max_model_len."""
    bound = server.cuda_graph_prefill_max_context
    if not server.cuda_graph_prefill:
        if bound is not None:
            raise BadValue("cuda_graph_prefill_max_context", "cuda_graph_prefill_max_context sizes the prefill CUDA "
                                                             "graph: turn it on (--cuda-graph-backend-prefill breakable)")
        return None
    profile, model = settings.profile, settings.preset
    if not (profile.compressed_prefill_graph and model.compressed):
        raise BadValue("cuda_graph_prefill", f"cuda_graph_prefill: a prefill CUDA graph of the C4 indexer is modelled "
                                             f"for DeepSeek-V4 on SGLang 0.5.21-0.5.23, not {model.name} on {profile.name}")
    if bound is not None and not 1 <= bound <= max_model_len:
        raise BadValue("cuda_graph_prefill_max_context", f"cuda_graph_prefill_max_context {bound}: must be in "
                                                         f"[1, max_model_len {max_model_len}]")
    return prefill_graph_line(settings, scheduler.max_num_batched_tokens, max_model_len,
                              scheduler.speculative_tokens, bound)


def _budget(strategy, settings, server: Server, free_bytes: int) -> int | None:
    """The logits budget the run plans with: the release's own (its knob at budget_mb for vLLM,
    SGLang's measured from the free memory) or a strategy's budget_mb."""
    profile = settings.profile
    if strategy.own_build:
        kwargs = {} if server.mem_fraction_static is None else {"mem_fraction_static": server.mem_fraction_static}
        return process_budget(profile, free_bytes, settings.gpu_preset.capacity_bytes,
                              value=server.budget_mb if profile.engine == "vllm" else server.knob,
                              compressed=settings.preset.kv_ratio != 1, rocm=settings.gpu_preset.rocm, **kwargs)
    if server.budget_mb is None and strategy.budget_source(profile) != NO_BUDGET:
        raise BadValue("budget_mb", f"strategy {strategy.name}: give its budget_mb")
    return strategy.budget_bytes(server.budget_mb, free_bytes / GIB, settings, server.mem_fraction_static)


# a budget users set on integrated GPUs (vllm-project/vllm#55569, #55572)
INTEGRATED_BUDGET_MB = 64


def what_ifs(server: Server, model, longest: int | None = None) -> list[tuple[str, Server]]:
    """The settings users ask about, each as the server with it (those a release has, or that
    PyTorch has): expandable segments, a 64 MiB logits budget (vLLM's knob), a K workspace sized
    to the most K a step can hold (every running request at max_model_len, in entries of
    compressed K; the project's what-if, not a release's), where SGLang's prefill CUDA graph is
    on, its context bounded to ``longest`` (the workload's longest prompt plus its output), and
    the prefill logits buffers the release's path takes (``ledger.buffers``)."""
    from ..engines import get_engine

    profile = get_engine(server.engine)
    out = [("as given", server)]
    if not server.expandable_segments:
        out.append(("expandable_segments on", replace(server, expandable_segments=True)))
    if profile.engine == "vllm" and profile.has_budget and server.budget_mb != INTEGRATED_BUDGET_MB:
        out.append((f"{profile.budget_env}={INTEGRATED_BUDGET_MB}", replace(server, budget_mb=INTEGRATED_BUDGET_MB)))
    mml = model.max_model_len if server.max_model_len is None else server.max_model_len
    seqs = server.max_num_seqs or scheduler_defaults(profile, server.gpu)["max_num_seqs"]
    settings = PlanSettings(model.name, profile, temporaries="deepgemm", gpu=server.gpu)
    own = settings.workspace_at(mml)
    sized = seqs * mml // model.kv_ratio
    if own is not None and server.workspace_tokens is None and sized < own:
        out.append((f"K workspace {sized:,} (max_num_seqs x max_model_len)", replace(server, workspace_tokens=sized)))
    if server.cuda_graph_prefill and longest is not None:
        bound = align(longest, profile.compressed_page_tokens)  # as SGLang rounds it, to its page
        given = server.cuda_graph_prefill_max_context
        if bound < mml and (given is None or bound < given):
            out.append((f"--cuda-graph-prefill-max-context {bound:,}",
                        replace(server, cuda_graph_prefill_max_context=bound)))
    if server.logits_buffer is None:
        out += [(name, replace(server, logits_buffer=kind)) for kind, name in BUFFER_WHAT_IFS
                if buffer_refusal(kind, settings.own_chunker) is None]
    return out


BUFFER_WHAT_IFS = (("fixed-width", "fixed-width logits (vllm#58068, sizing assumed)"),
                   ("pooled", "pooled prefill logits buffer (sglang#37660)"))
