"""``Deployment``: how a grid's server is deployed, beyond its scheduler: draft tokens, the KV
cache and the memory fractions that size it, tensor parallelism and where TP splits rows."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import BadValue, check_int
from ..engines import DEFAULT_ENGINE, engine_names, get_engine
from ..engines.budget import SGLANG_MEM_FRACTION_STATIC
from ..engines.kv_capacity import KV_CACHE_DTYPES, KvCapacity, deployment_kv_cache
from ..engines.dp_attention import check_dp
from ..engines.scheduler import tp_row_shard_refusal
from ..workload import SchedulerConfig
from ..workload.simulator import MAX_SPECULATIVE_TOKENS
from .setting import Settings, setting


@dataclass(frozen=True)
class Deployment(Settings):
    """The deployment: draft tokens per decode (speculative decoding, MTP; 0: none, as vLLM serves
    by default), the KV cache in tokens per GPU (0: room for every running request; a smaller cache
    holds back admissions and preempts: docs/design.md#preemption; "auto": derived per release,
    ``engines.kv_capacity``), the fractions and dtype that derive it, and tensor parallelism."""

    speculative_tokens: int = setting(
        0, "draft tokens per decode step (speculative decoding, e.g. MTP's num_speculative_tokens), every draft "
           "taken as accepted; a decode with more drafts than the release's indexer takes in its decode path is "
           "computed in its prefill path (default: 0, none, as engines serve unless asked)", read="int")
    kv_cache_tokens: int | str = setting(
        0, "the KV cache per GPU in tokens, as the engine logs it ('GPU KV cache size'), or 'auto': derived from "
           "the model's checkpoint at --tp, --gpu-memory-utilization and --kv-cache-dtype "
           "(docs/design.md#kv-cache-capacity); a cache smaller than the running requests need holds back "
           "admissions and preempts, as the release's own scheduler does; with --speculative-tokens only on the "
           "synchronous scheduler (--no-async-scheduling) (default: 0, room for every running request)",
        read="kv_cache_tokens")
    # for kv_cache_tokens "auto": vLLM's --gpu-memory-utilization (None: each release's own)
    gpu_memory_utilization: float | None = setting(
        None, lambda: "vLLM: the server's --gpu-memory-utilization, for --kv-cache-tokens auto (default: the "
                      f"release's; {get_engine(DEFAULT_ENGINE).gpu_memory_utilization} for "
                      f"{get_engine(DEFAULT_ENGINE).name})", read="fraction")
    kv_cache_dtype: str = setting(
        "auto", "the server's --kv-cache-dtype, for --kv-cache-tokens auto (default: auto, the model's bf16 "
                "latent; fp8: the 656-byte fp8_ds_mla layout)", choices=KV_CACHE_DTYPES)
    # SGLang's --mem-fraction-static: it caps the logits budget SGLang measures (f x (1 - it) x the
    # GPU's memory) and, with kv_cache_tokens "auto", sizes its KV cache; None: 0.9, SGLang's own
    # choice on an H200 (named in every row that differs)
    mem_fraction_static: float | None = setting(
        None, "SGLang: the server's --mem-fraction-static, which caps the logits budget SGLang measures (f x "
              "(1 - it) x the GPU's memory) and, with --kv-cache-tokens auto, sizes its KV cache (default "
              f"{SGLANG_MEM_FRACTION_STATIC}: SGLang's own choice on an H200)", read="fraction")
    # tensor parallelism: named where it is not 1, and it changes no step: every TP rank runs the
    # whole indexer (vLLM's Indexer builds wq_b, wk and weights_proj as ReplicatedLinear over all
    # index heads), so TP only sizes the KV cache per GPU, which kv_cache_tokens gives
    tp: int = setting(
        1, "tensor-parallel size, named next to the numbers; it changes no step: every rank runs the whole "
           "indexer (all its heads), and TP only sizes the KV cache per GPU, which --kv-cache-tokens gives "
           "(default: 1)", read="int")
    # SGLang's DP attention: the ranks of attention TP tp / dp, each with its own scheduler; one
    # rank is planned, as the indexer's memory is per GPU (``engines.dp_attention``)
    dp: int = setting(
        1, "SGLang: DP attention ranks (the server's --dp-size N --enable-dp-attention, or --attn-dp-size N), "
           "dividing --tp; one rank is planned: its chunked_prefill_size (and a given --max-num-seqs) divided by "
           "N as SGLang does, and ceil(concurrency / N) clients, as its round-robin dispatcher deals them "
           "(default: 1, no DP attention)", read="int")
    # vLLM 0.33.0's attention config indexer_tp_shard_min_rows: at TP > 1 a step of at least this
    # many prefill rows is split over the ranks, which is not modelled (``engines.tp_row_shard_refusal``);
    # None: the release's own (``tp_prefill_row_shard_min_rows`` in data/engines/)
    indexer_tp_shard_min_rows: int | None = setting(
        None, lambda: "vLLM: the server's attention config indexer_tp_shard_min_rows (--attention-config), the "
                      "prefill rows from which a step is split over the TP ranks, not modelled: a TP grid whose "
                      "batched tokens reach it is refused (default: the release's: "
                      f"{', '.join(f'{_shard_rows(e)} for {e}' for e in engine_names() if _shard_rows(e))}; "
                      "the others never split)", read="int")

    def check(self) -> None:
        check_int("speculative_tokens", self.speculative_tokens, 0, MAX_SPECULATIVE_TOKENS)
        if self.kv_cache_tokens != "auto":
            check_int("kv_cache_tokens", self.kv_cache_tokens, 0)
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise BadValue("kv_cache_dtype", f"kv_cache_dtype {self.kv_cache_dtype!r}: must be one of "
                                             f"{', '.join(KV_CACHE_DTYPES)}")
        check_int("tp", self.tp, 1, 1024)
        check_int("dp", self.dp, 1, 1024)  # with the release's rules: check_engines
        if self.indexer_tp_shard_min_rows is not None:
            check_int("indexer_tp_shard_min_rows", self.indexer_tp_shard_min_rows, 1)
        m = self.mem_fraction_static
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1):
            raise BadValue("mem_fraction_static", f"mem_fraction_static {m!r}: must be a fraction in [0, 1] "
                                                  "(SGLang's --mem-fraction-static)")

    def check_engines(self, engines: tuple[str, ...]) -> None:
        """A setting of one engine's server given to a grid without that engine is refused (DP
        attention: on every release of the grid)."""
        for e in engines:
            check_dp(e, self.tp, self.dp, self.kv_cache_tokens == "auto")
        if self.mem_fraction_static is not None and not any(get_engine(e).engine == "sglang" for e in engines):
            raise BadValue("mem_fraction_static", "mem_fraction_static is SGLang's --mem-fraction-static: the grid "
                                                  f"has no SGLang release ({', '.join(engines)})")
        if self.indexer_tp_shard_min_rows is not None and not any(_shard_rows(e) for e in engines):
            raise BadValue("indexer_tp_shard_min_rows", "indexer_tp_shard_min_rows is vLLM 0.33.0's attention "
                                                        "config: no release of the grid splits prefill rows over TP "
                                                        f"({', '.join(engines)})")

    def tp_refusal(self, engine: str, config: SchedulerConfig) -> str | None:
        """Why the deployment is not planned on this release's scheduler (one line), or None."""
        return tp_row_shard_refusal(engine, config, self.tp, self.indexer_tp_shard_min_rows)

    def kv_cache(self, model: str, engine: str, gpu: str) -> KvCapacity | None:
        """The KV cache ``kv_cache_tokens`` "auto" derives on one release (None: a number of tokens given)."""
        return deployment_kv_cache(self.kv_cache_tokens, model, engine, gpu, self.tp, self.cache_fraction(engine),
                                   self.kv_cache_dtype, self.speculative_tokens)

    def cache_fraction(self, engine: str) -> float | None:
        """The memory fraction that sizes a release's derived KV cache: SGLang's
        mem_fraction_static (where the cache is derived), else vLLM's gpu_memory_utilization."""
        if get_engine(engine).engine == "sglang" and self.mem_fraction_static is not None:
            return self.mem_fraction_static if self.kv_cache_tokens == "auto" else None
        return self.gpu_memory_utilization

    def mem_fraction_static_on(self, engine: str) -> float | None:
        """SGLang's --mem-fraction-static on a release (None: its default, or not SGLang)."""
        return self.mem_fraction_static if get_engine(engine).engine == "sglang" else None

    def not_default(self, engine: str) -> list[str]:
        """The deployment's settings on a release that are not its default, beyond the scheduler's
        (which ``engines.not_default`` names)."""
        differ = []
        m = self.mem_fraction_static_on(engine)
        if m is not None and m != SGLANG_MEM_FRACTION_STATIC:
            differ.append(f"mem_fraction_static={m:g} (default {SGLANG_MEM_FRACTION_STATIC:g})")
        rows, default = self.indexer_tp_shard_min_rows, _shard_rows(engine)
        if rows is not None and default is not None and rows != default:
            differ.append(f"indexer_tp_shard_min_rows={rows} (default {default})")
        return differ


def _shard_rows(engine: str) -> int | None:
    """The prefill rows from which a release splits a step over its TP ranks (None: it never does)."""
    return get_engine(engine).tp_prefill_row_shard_min_rows
