"""``SchedulerSettings``: the scheduler a grid's steps come from, each setting its release's own
default unless given."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..checks import check_int
from ..engines import DEFAULT_ENGINE, get_engine, release_scheduler, scheduler_defaults
from ..workload import MAX_BATCHED_TOKENS, MAX_CONCURRENCY, WORKLOAD_SOURCES, SchedulerConfig, check_source
from .setting import Settings, setting


def _default(name: str, what: str = "") -> str:
    """An option's help: the default release's own value of a scheduler setting."""
    value = scheduler_defaults(DEFAULT_ENGINE)[name]
    return f"{value}{what} for {get_engine(DEFAULT_ENGINE).name}"


@dataclass(frozen=True)
class SchedulerSettings(Settings):
    """The scheduler's settings: None, each engine release's own default
    (``engines.scheduler_defaults``, on the grid's GPU); a value given is named in every row that
    differs from its release's default.  The three sizes are axes (a tuple each)."""

    max_num_batched_tokens: tuple[int, ...] | None = setting(
        None, lambda: f"tokens per step (default: the release's; {_default('max_num_batched_tokens')} on an H200)",
        read="int")
    max_num_seqs: tuple[int, ...] | None = setting(
        None, lambda: f"requests running at once (default: the release's; {_default('max_num_seqs')})", read="int")
    long_prefill_token_threshold: tuple[int, ...] | None = setting(
        None, lambda: "cap on one request's prompt tokens per step while others prefill (default: the release's; "
                      f"{_default('long_prefill_token_threshold', ', no cap,')})", read="int")
    async_scheduling: bool | None = setting(
        None, lambda: "the scheduler plans one step ahead (default: the release's; "
                      f"{'on' if scheduler_defaults(DEFAULT_ENGINE)['async_scheduling'] else 'off'} for "
                      f"{get_engine(DEFAULT_ENGINE).name})", read="yes-no")
    # whose scheduler makes the steps: the built-in simulator, or vLLM's own
    workload_source: str = setting(
        "simulator", "step batches from the built-in simulator or vLLM's own scheduler "
                     "(needs vLLM: bash scripts/install_vllm.sh)", choices=WORKLOAD_SOURCES)

    def check(self) -> None:
        for name, maximum in (("max_num_batched_tokens", MAX_BATCHED_TOKENS), ("max_num_seqs", MAX_CONCURRENCY),
                              ("long_prefill_token_threshold", None)):
            for v in getattr(self, name) or ():
                check_int(name, v, 0 if name == "long_prefill_token_threshold" else 1, maximum)
        check_source(self.workload_source)

    def configs(self, engine: str, block_size: int, gpu: str, speculative_tokens: int,
                kv_cache_tokens: int, dp: int = 1) -> tuple[SchedulerConfig, ...]:
        """The scheduler on one release: each setting given, or the release's own default where it is
        None, one config per combination of the sizes given; the deployment's drafts per decode, KV
        cache in tokens (0: room for every running request) and DP attention ranks (one rank's)."""
        return tuple(release_scheduler(engine, block_size, gpu, dp=dp, max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                                       long_prefill_token_threshold=thr, async_scheduling=self.async_scheduling,
                                       speculative_tokens=speculative_tokens, kv_cache_tokens=kv_cache_tokens)
                     for mnbt, seqs, thr in itertools.product(self.max_num_batched_tokens or (None,),
                                                              self.max_num_seqs or (None,),
                                                              self.long_prefill_token_threshold or (None,)))
