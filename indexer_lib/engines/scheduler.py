"""The scheduler each release serves with by default, and the settings that differ from it.

Every number the project shows runs on the release's own scheduler defaults unless a setting
is given; a given setting that differs is named next to the number (``not_default``).
"""
from __future__ import annotations

from ..presets import get_gpu
from ..workload import SchedulerConfig
from .dp_attention import dp_phrase, rank_sizes
from .gpus import scheduler_gpu_defaults
from .profiles import EngineProfile, get_engine
from .rocm import rocm_setting

# the scheduler settings a release has a default for, as SchedulerConfig names them
SCHEDULER_SETTINGS = ("max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold",
                      "async_scheduling")


def scheduler_defaults(engine: str | EngineProfile | None, gpu=None, dp: int = 1) -> dict:
    """The release's default for each scheduler setting (``data/engines/``, with sources) on
    ``gpu`` (a name or a ``GpuPreset``; None: an H200, the GPU the profiles' figures are for), of
    one rank of ``dp`` (SGLang's DP attention: ``engines.dp_attention``)."""
    profile = get_engine(engine)
    values = {name: getattr(profile, f"scheduler_{name}") for name in SCHEDULER_SETTINGS}
    if gpu is not None:
        values.update(scheduler_gpu_defaults(profile, gpu))
    values.update(rank_sizes(profile, values["max_num_batched_tokens"], values["max_num_seqs"], False, dp))
    return values


def release_scheduler(engine: str | EngineProfile | None, block_size: int, gpu=None, kv_cache_tokens: int = 0,
                      dp: int = 1, **given) -> SchedulerConfig:
    """The scheduler as the release runs it on ``gpu`` (None: an H200): its defaults, with the
    settings given (not None) in their place; ``kv_cache_tokens`` (0: room for every running
    request) becomes whole KV blocks; ``dp``: the scheduler of one of that many DP attention ranks,
    the server's sizes divided as the release divides them (``engines.dp_attention``)."""
    if kv_cache_tokens:
        given["num_kv_blocks"] = -(-kv_cache_tokens // block_size)
    unknown = set(given) - set(SCHEDULER_SETTINGS) - {"num_kv_blocks", "enable_prefix_caching", "speculative_tokens"}
    if unknown:
        raise TypeError(f"release_scheduler: no scheduler setting {sorted(unknown)[0]!r}")
    values = scheduler_defaults(engine, gpu)
    values.update({k: v for k, v in given.items() if v is not None})
    values.update(rank_sizes(engine, values["max_num_batched_tokens"], values["max_num_seqs"],
                             given.get("max_num_seqs") is not None, dp))
    drafts = values.get("speculative_tokens") or 0
    # which decodes the release's indexer takes in its prefill path (data/engines/, with sources)
    profile = get_engine(engine)
    threshold = profile.indexer_decode_threshold(drafts)
    # how the release admits requests and returns blocks with a finite KV cache (idem)
    return SchedulerConfig(block_size=block_size, indexer_decode_threshold=threshold,
                           reserve_full_isl=profile.scheduler_reserve_full_isl,
                           threshold_lone_exempt=profile.scheduler_threshold_lone_exempt,
                           free_uncached_first=profile.scheduler_free_uncached_first,
                           pad_new_decodes=profile.scheduler_pad_new_decodes, dp=dp, **values)


def not_default(engine: str | EngineProfile | None, config: SchedulerConfig, gpu=None, kv_cache=None) -> list[str]:
    """The settings of ``config`` that differ from the release's defaults on ``gpu``, each as
    ``name=value (default D)``: what a table or a title must name next to its numbers; ``kv_cache``
    (``engines.kv_capacity.KvCapacity``): the cache was derived, and is named with its derivation."""
    defaults = scheduler_defaults(engine, gpu, config.dp)  # one rank's, where there are several
    differ = [f"{name}={getattr(config, name)} (default {default})" for name, default in defaults.items()
              if getattr(config, name) != default]
    differ += [dp_phrase(config.dp)] if config.dp != 1 else []
    rocm = rocm_setting(get_engine(engine), get_gpu(gpu)) if gpu is not None else None
    differ += [rocm] if rocm else []
    if config.speculative_tokens:  # no release serves with speculative decoding unless asked
        differ.append(f"speculative_tokens={config.speculative_tokens} (default 0)")
    if config.num_kv_blocks:  # the default is a cache with room for every running request
        differ.append(f"kv_cache_tokens={kv_cache.phrase() if kv_cache else config.num_kv_blocks * config.block_size}")
    return differ


def not_default_text(engine: str | EngineProfile | None, config: SchedulerConfig, gpu=None, kv_cache=None) -> str:
    """``not_default`` as one phrase; '' when the scheduler is the release's own."""
    return "; ".join(not_default(engine, config, gpu, kv_cache))


def tp_row_shard_refusal(engine: str | EngineProfile | None, config: SchedulerConfig, tp: int,
                         min_rows: int | None = None) -> str | None:
    """Why a TP deployment is not planned on this release's scheduler (one line), or None: vLLM
    0.33 splits a step of many prefill rows over its TP ranks, each scoring only its own rows, which
    the planners do not model; a step never has more prefill rows than max_num_batched_tokens.
    ``min_rows``: the server's indexer_tp_shard_min_rows (None: the release's default)."""
    profile = get_engine(engine)
    shard_from = profile.tp_prefill_row_shard_min_rows
    if shard_from is not None and min_rows is not None:
        shard_from = min_rows
    if tp > 1 and shard_from is not None and config.max_num_batched_tokens >= shard_from:
        whose = ("indexer_tp_shard_min_rows as given" if min_rows is not None else
                 f"its indexer_tp_shard_min_rows; {profile.sources.get('file')}: tp_prefill_row_shard_min_rows")
        return (f"{profile.name} at tp={tp} with max_num_batched_tokens {config.max_num_batched_tokens}: a step of "
                f"{shard_from:,} or more prefill rows is split over the TP ranks, each scoring its own rows "
                f"({whose}), which is not modelled; plan with --tp 1 (every rank's rows), fewer batched tokens "
                "or a larger --indexer-tp-shard-min-rows")
    return None
