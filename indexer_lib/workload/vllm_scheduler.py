"""Workloads from vLLM's own V1 scheduler, driven closed-loop on the CPU.

``schedule(workload, config)`` builds vLLM's ``Scheduler`` (or ``AsyncScheduler``
when ``config.async_scheduling``) from the same settings as the built-in
simulator, feeds it synthetic prompts, plays the model runner (one sampled token
per request per step once its prompt is done; requests stop on length) and the
engine loop, and yields the same ``ScheduledStep`` records as
``indexer_lib.workload.simulate``.  No model, weights, tokenizer or GPU are used.

With ``config.speculative_tokens`` K (synchronous scheduling only) it also plays a drafter:
every request that sampled gets K drafts, all accepted in the next step; the scheduler takes
them through the n-gram method's path, which needs no draft model.  With a finite KV cache
(``config.num_kv_blocks``) vLLM preempts and resumes requests itself; a resumed request's
recomputed tokens are prefill rows, and admissions and freed blocks follow the installed
release's own rule, whatever ``config.reserve_full_isl`` and ``config.free_uncached_first`` say
(the simulator's copy of that rule, docs/design.md#preemption).  The drive runs whichever vLLM is
importable: the project's 0.33.0, or a release's own under ``.venv-engines/`` (0.15.1 and 0.19.0
agree with the simulator on their own rules in the tests' scenarios).

vLLM is optional: install it with ``bash scripts/install_vllm.sh`` (vLLM
``VLLM_VERSION``, with ``--no-deps`` next to the CPU build of torch, then the
few packages the scheduler's imports need).  Without it, ``schedule`` raises
``VllmUnavailable`` saying so.

How the engine is played, as vLLM's ``EngineCore`` does it:

- sync: schedule a step, run it, process its output; a client whose request
  finished sends its next prompt before the next step is scheduled;
- async (``step_with_batch_queue``, queue of two): step k+1 is scheduled before
  step k's output is processed, so a replacement first meets step k+2.

A scheduling pass that schedules no token is not an executed step: it is not
yielded and not counted (the simulator numbers steps the same way).
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from collections import deque
from functools import lru_cache
from typing import Iterator

from .batch import PrefillRequest, StepBatch
from .simulator import ClosedLoopWorkload, ScheduledStep, SchedulerConfig, kv_blocks_needed

VLLM_VERSION = "0.33.0"  # the version this driver was verified against
INSTALL_HINT = (
    f"install it with `bash scripts/install_vllm.sh` (vLLM {VLLM_VERSION} with --no-deps "
    "next to torch's CPU build, plus the packages its scheduler imports)"
)

# token ids: a shared-prefix token, the first token of each prompt's own tail
# (one per request, so no two tails share a block), filler, the sampled token
_PREFIX_TOKEN = 11
_TAIL_FIRST = 1000
_FILLER_TOKEN = 12
_SAMPLED_TOKEN = 13
_VOCAB = 1 << 24
_MAX_EMPTY_PASSES = 64  # consecutive passes that schedule nothing: vLLM is stuck


class VllmUnavailable(ImportError, ValueError):
    """The ``vllm`` workload source was asked for but vLLM cannot be imported.

    An ImportError, and a ValueError so the CLI reports it as one line."""


def _import_vllm():
    # only the scheduler is used: the warnings about vLLM's missing compiled extension
    # (vllm._C) and torch's missing Triton are expected on a CPU machine and would show
    # as error output in notebooks; a user's own VLLM_LOGGING_LEVEL still wins (an ERROR level
    # may be ours, inherited by a child process from an earlier import)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    quiet = os.environ["VLLM_LOGGING_LEVEL"].upper() == "ERROR"
    logging.getLogger("torch._library.triton").setLevel(logging.ERROR)
    try:
        import torch
        import vllm
        from vllm import SamplingParams
        from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig as VSchedulerConfig
        from vllm.config import ParallelConfig, SpeculativeConfig, VllmConfig
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager
        if quiet:  # vLLM configures its loggers on import; its CPU warnings come later
            logging.getLogger("vllm").setLevel(logging.ERROR)
    except ImportError as e:
        raise VllmUnavailable(
            f"workload source 'vllm' needs vLLM, which cannot be imported here ({e}); "
            + INSTALL_HINT
        ) from e
    return dict(locals())


@lru_cache(maxsize=1)
def vllm_modules() -> dict:
    """vLLM's scheduler classes and configs, imported once (a slow import)."""
    return _import_vllm()


def vllm_available() -> bool:
    try:
        vllm_modules()
    except VllmUnavailable:
        return False
    return True


def vllm_version() -> str:
    return vllm_modules()["vllm"].__version__


@lru_cache(maxsize=1)
def _tiny_model_dir() -> str:
    """A folder holding only the config.json of a tiny Llama: ModelConfig needs a
    model, the scheduler never touches weights or a tokenizer."""
    path = tempfile.mkdtemp(prefix="indexer-lab-tiny-llama-")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 1,
        "vocab_size": _VOCAB,
        "max_position_embeddings": 1 << 22,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def build_scheduler(workload: ClosedLoopWorkload, config: SchedulerConfig):
    """vLLM's Scheduler (AsyncScheduler when async) for these settings.

    KV cache: one full-attention group of ``config.num_kv_blocks`` blocks of
    ``config.block_size`` tokens, or when that is 0 enough blocks that no
    request is ever refused or preempted (the simulator's assumption).
    """
    v = vllm_modules()
    # any length >= prompt + output schedules the same; vLLM wants it >= the threshold
    # (with drafts: room for a last decode's drafts, which the scheduler would otherwise cut)
    max_model_len = max(workload.max_prompt_len + workload.osl + config.speculative_tokens,
                        config.long_prefill_token_threshold)
    blocks = config.num_kv_blocks or kv_blocks_needed(workload, config) + 1  # + vLLM's null block
    if workload.warm_cache and not config.num_kv_blocks:  # room for every prompt's cached blocks too
        blocks += sum(-(-n // config.block_size) for n in workload.prompt_lens)
    if config.speculative_tokens and config.async_scheduling:
        # ours, not vLLM's limit: the drive plays the drafts between the steps of the synchronous
        # scheduler only (before vLLM sees the settings, so it is not taken for vLLM's refusal)
        raise ValueError("the drive plays speculative decoding on vLLM's synchronous scheduler only: set "
                         "async_scheduling off (--no-async-scheduling)")
    try:
        model_config = v["ModelConfig"](
            model=_tiny_model_dir(), tokenizer=_tiny_model_dir(), skip_tokenizer_init=True,
            max_model_len=max_model_len, dtype="bfloat16",
        )
        scheduler_config = v["VSchedulerConfig"](
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_num_seqs=config.max_num_seqs,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
            enable_chunked_prefill=True,
            async_scheduling=config.async_scheduling,
        )
        cache_config = v["CacheConfig"](
            block_size=config.block_size, enable_prefix_caching=config.enable_prefix_caching,
        )
        cache_config.num_gpu_blocks = blocks
        speculative_config = None
        if config.speculative_tokens:
            # the n-gram method: a drafter with no model, so the scheduler runs alone; the drafts
            # themselves are played below, like the sampled tokens
            speculative_config = v["SpeculativeConfig"](
                method="ngram", num_speculative_tokens=config.speculative_tokens,
                prompt_lookup_max=config.speculative_tokens, prompt_lookup_min=1,
                target_model_config=model_config, target_parallel_config=v["ParallelConfig"](),
            )
        vllm_config = v["VllmConfig"](
            model_config=model_config, scheduler_config=scheduler_config,
            cache_config=cache_config, speculative_config=speculative_config,
            # explicit: on a machine without a GPU vLLM cannot detect a device
            device_config=v["DeviceConfig"](device="cuda"),
        )
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"vLLM refuses these scheduler settings: {e}") from None
    sc = vllm_config.scheduler_config
    got = (sc.max_num_batched_tokens, sc.max_num_seqs, sc.long_prefill_token_threshold,
           bool(sc.async_scheduling), vllm_config.cache_config.block_size,
           bool(vllm_config.cache_config.enable_prefix_caching))
    want = (config.max_num_batched_tokens, config.max_num_seqs,
            config.long_prefill_token_threshold, config.async_scheduling, config.block_size,
            config.enable_prefix_caching)
    if got != want:
        raise RuntimeError(f"vLLM changed the scheduler settings: asked {want}, got {got}")
    kv_cache_config = v["KVCacheConfig"](
        num_blocks=blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[v["KVCacheGroupSpec"](
            ["model.layers.0.self_attn.attn"],
            v["FullAttentionSpec"](block_size=config.block_size, num_kv_heads=1, head_size=64,
                                   dtype=v["torch"].bfloat16),
        )],
    )
    cls = v["AsyncScheduler"] if config.async_scheduling else v["Scheduler"]
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=v["StructuredOutputManager"](vllm_config),
        block_size=config.block_size,
    )


def _prompt(workload: ClosedLoopWorkload, rid: int) -> list[int]:
    # the rid-th prompt sent has the rid-th length, as in the simulator
    tail = workload.prompt_lens[rid] - workload.shared_prefix
    tokens = [_PREFIX_TOKEN] * workload.shared_prefix
    if tail:
        tokens.append(_TAIL_FIRST + rid % (_VOCAB - _TAIL_FIRST))
        tokens.extend([_FILLER_TOKEN] * (tail - 1))
    return tokens


def schedule(workload: ClosedLoopWorkload, config: SchedulerConfig = SchedulerConfig()
             ) -> Iterator[ScheduledStep]:
    """vLLM's own schedule of a closed-loop workload, step by step.

    Yields one ``ScheduledStep`` per executed engine step: the prefill rows
    (context, query) in the scheduler's order, the number of decode requests
    that rode along, and the prefill requests' ids (prompt numbers, from 0).
    """
    vllm_modules()  # raises VllmUnavailable now, not at the first step
    return _drive(build_scheduler(workload, config), workload, config)


def _drive(scheduler, workload: ClosedLoopWorkload, config: SchedulerConfig
           ) -> Iterator[ScheduledStep]:
    v = vllm_modules()
    hash_fn = v["get_hash_fn_by_name"](scheduler.cache_config.prefix_caching_hash_algo)
    v["init_none_hash"](hash_fn)
    block_hasher = v["get_request_block_hasher"](config.block_size, hash_fn)
    SamplingParams, Request = v["SamplingParams"], v["Request"]
    ModelRunnerOutput = v["ModelRunnerOutput"]
    # releases before 0.17 take the eos token id as a required argument, and their runner
    # output has no prompt_token_id_logprobs_dict
    release_args = {"eos_token_id": None} if "eos_token_id" in _parameters(Request) else {}
    output_args = ({"prompt_token_id_logprobs_dict": {}}
                   if "prompt_token_id_logprobs_dict" in _parameters(ModelRunnerOutput) else {})
    sent = 0

    def add(rid: str, k: int, max_tokens: int) -> None:
        """The k-th prompt as request ``rid``, to sample ``max_tokens`` tokens."""
        scheduler.add_request(Request(rid, _prompt(workload, k), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                                      None, block_hasher=block_hasher, **release_args))

    def send(n: int) -> None:
        nonlocal sent
        for _ in range(min(n, workload.total_prompts - sent)):
            add(str(sent), sent, workload.osl)
            sent += 1

    def process(out, sampled: set[str], clients: bool = True) -> None:
        """Play the model runner's output for one step, then the clients (``clients``: each whose
        request finished sends its next prompt)."""
        ids = list(out.num_scheduled_tokens)
        finished = 0
        for outputs in scheduler.update_from_output(out, _runner_output(ModelRunnerOutput, out, sampled,
                                                                        output_args)).values():
            finished += sum(o.finish_reason is not None for o in outputs.outputs)
        if config.speculative_tokens:  # the drafter proposes for every request that sampled
            live = [r for r in ids if r in sampled and r in scheduler.requests
                    and not scheduler.requests[r].is_finished()]
            scheduler.update_draft_token_ids(v["DraftTokenIds"](
                live, [[_SAMPLED_TOKEN] * config.speculative_tokens for _ in live]))
        if clients:
            send(finished)  # each client whose request finished sends its next prompt

    if workload.warm_cache:
        _warm_cache(scheduler, workload, add, process)
    send(workload.concurrency)
    in_flight: deque = deque()  # async: the step scheduled but not yet processed
    step = empty = 0
    while True:
        if scheduler.has_requests():
            out = scheduler.schedule()
            record = _record(scheduler, out, step, config.decode_threshold)
            # the runner samples a token for every request whose prompt is done
            sampled = {r for r in out.num_scheduled_tokens if not _prefill_chunk(scheduler.requests[r])}
            if record is not None:
                yield record
                step += 1
                empty = 0
            else:
                empty += 1
                if empty > _MAX_EMPTY_PASSES:
                    raise RuntimeError(
                        f"vLLM's scheduler makes no progress ({empty} empty passes with "
                        f"{len(scheduler.running)} running, {len(scheduler.waiting)} waiting): "
                        "is the KV cache (num_kv_blocks) too small for one request?"
                    )
            if not config.async_scheduling:
                process(out, sampled)
                continue
            in_flight.appendleft((out, sampled))
            if len(in_flight) < 2 and (out.total_num_scheduled_tokens > 0
                                       or scheduler.has_requests()):
                continue
        elif not in_flight:
            break
        process(*in_flight.pop())


def _runner_output(ModelRunnerOutput, out, sampled: set[str], output_args: dict):
    """What the model runner returns for a step: a sampled token for each request in ``sampled``,
    and every draft accepted (one more token per draft)."""
    ids = list(out.num_scheduled_tokens)
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={r: i for i, r in enumerate(ids)},
        sampled_token_ids=[[_SAMPLED_TOKEN] * (1 + len(out.scheduled_spec_decode_tokens.get(r, ())))
                           if r in sampled else [] for r in ids],
        logprobs=None,
        prompt_logprobs_dict={},
        **output_args,
    )


def _warm_cache(scheduler, workload: ClosedLoopWorkload, add, process) -> None:
    """A run of the same prompts before the measured one, one output token each, so that every
    prompt's full blocks are in the prefix cache when it starts (``add(rid, k, max_tokens)``,
    ``process(out, sampled, clients)``: ``_drive``'s)."""
    for k in range(workload.total_prompts):
        add(f"warm{k}", k, 1)
    while scheduler.has_requests():
        out = scheduler.schedule()
        process(out, {r for r in out.num_scheduled_tokens if not _prefill_chunk(scheduler.requests[r])},
                clients=False)


def _prefill_chunk(request) -> bool:
    """Whether the step just scheduled leaves the request's prompt unfinished (no token sampled).
    The scheduler has already advanced its computed tokens; releases before 0.17 have no flag."""
    flag = getattr(request, "is_prefill_chunk", None)
    return request.num_computed_tokens < request.num_tokens if flag is None else flag


def _parameters(cls) -> set[str]:
    import inspect

    return set(inspect.signature(cls).parameters)


def _record(scheduler, out, step: int, decode_threshold: int = 1) -> ScheduledStep | None:
    """The step's prefill rows, in the order vLLM scheduled them (docs/design.md#preemption)."""
    if out.total_num_scheduled_tokens == 0:
        return None
    context: dict[str, int] = {}
    for new in out.scheduled_new_reqs:
        context[new.req_id] = new.num_computed_tokens
    cached = out.scheduled_cached_reqs
    for rid, computed in zip(cached.req_ids, cached.num_computed_tokens):
        context[rid] = computed
    rows, ids, num_decode = [], [], 0
    for rid, n in out.num_scheduled_tokens.items():
        ctx = context[rid]
        # the indexer's prefill path takes every prompt chunk, and every request with more new
        # tokens than its decode path takes: a decode with too many drafts, a preempted request
        # resuming past its prompt (it recomputes its outputs)
        if ctx < scheduler.requests[rid].num_prompt_tokens or n > decode_threshold:
            rows.append(PrefillRequest(ctx, n))
            ids.append(int(rid))
        else:
            num_decode += 1
    batch = StepBatch(tuple(rows), step) if rows else None
    return ScheduledStep(step, batch, num_decode, tuple(ids))
