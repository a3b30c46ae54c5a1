"""The logits budget as each engine release computes it, call after call.

- vLLM 0.19.0+: ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (512), the same bytes every step;
- SGLang 0.5.13+: ``f x`` free memory (f = ``SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION``,
  0.2), capped by ``f x (1 - mem_fraction_static) x total`` and ``0.3 x total``, read
  at the first call with at least 8,000,000 logits elements and kept for the process;
- SGLang 0.5.6-0.5.12: half the free memory, read on every such call;
- SGLang 0.5.20+ on ROCm (``rocm``): any of its budgets capped at 2^31-1 bytes a call
  (``rocm_budget_cap_bytes``, aiter's logits limit);
- SGLang 0.5.23's DeepSeek-V4 C4 indexer (``compressed=True``): the 0.5.13+ arithmetic, read on
  every forward at or past the gate and never cached;
- TensorRT-LLM from the element cap: ``TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET`` (2^31) fp32
  elements per logits call, the same every step;
- earlier releases: no budget.

``EngineBudget.for_call(rows, cols, free_bytes)`` is the budget one indexer call
plans with, or None where the engine does not read one (no budget, or SGLang
below its element gate).  Integer arithmetic follows the engines' own code
(``int()`` truncations included), so the budgets match byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import FP32_BYTES
from ..presets import budget_bytes_from_mb, get_gpu
from .profiles import EngineProfile, get_engine

SGLANG_TOTAL_FRACTION = 0.3
# SGLang sets --mem-fraction-static from the GPU's memory: about 0.9 on an H200
# (python/sglang/srt/arg_groups/memory_hook.py: 0.886 at TP8 to 0.906 at TP1)
SGLANG_MEM_FRACTION_STATIC = 0.9


def sglang_static_budget(total_bytes: int, mem_fraction_static: float | None, fraction: float) -> int:
    """SGLang's budget from configuration alone (``mqa_logits_static_budget_bytes``)."""
    total_budget = int(total_bytes * SGLANG_TOTAL_FRACTION)
    if mem_fraction_static is not None and not 0 <= mem_fraction_static <= 1:
        raise ValueError(f"mem_fraction_static {mem_fraction_static!r}: must be a fraction in [0, 1] "
                         "(SGLang's --mem-fraction-static)")
    if mem_fraction_static is None:
        budget = total_budget
    else:
        static_free = int(total_bytes * max(0.0, 1.0 - mem_fraction_static))
        budget = min(int(static_free * fraction), total_budget)
    return max(1, budget)


@dataclass
class EngineBudget:
    """One process's logits budget for an engine release.

    ``value``: vLLM's MiB or SGLang's free-memory fraction (default: the release's);
    ``total_bytes`` and ``mem_fraction_static``: the GPU and SGLang's static fraction.
    """

    engine: EngineProfile | str | None = None
    value: float | None = None
    total_bytes: int | None = None
    mem_fraction_static: float | None = None
    # the budget of the release's path for compressed K (DeepSeek-V4's C4 indexer), where its
    # profile has one of its own (``compressed_budget_rule``)
    compressed: bool = False
    rocm: bool = False  # on a ROCm GPU: the release's ROCm cap applies (``rocm_budget_cap_bytes``)
    cached: int | None = field(default=None, init=False)  # SGLang's first measured budget
    readings: int = field(default=0, init=False)  # free-memory readings taken

    def __post_init__(self):
        self.engine = get_engine(self.engine)
        if self.value is None:
            self.value = self.engine.budget_default
        rule = self.rule
        if rule == "fixed-mib":
            budget_bytes_from_mb(self.value)  # a bad MiB value fails here, with its rule
        if rule == "fixed-elements" and not (float(self.value).is_integer() and self.value >= 1):
            raise ValueError(f"{self.engine.budget_env} {self.value!r}: must be a whole number of elements >= 1")
        if rule.startswith("sglang") and self.total_bytes is None:
            raise ValueError(f"{self.engine.name}: its budget needs the GPU's total memory (total_bytes)")
        if rule in ("sglang-cached", "sglang-capped-per-call") and not 0 < self.value <= 1:
            raise ValueError(f"{self.engine.budget_env} {self.value!r}: must be a fraction in (0, 1]")

    @property
    def rule(self) -> str:
        """The budget rule in use: the compressed path's own where asked and the release has one."""
        if self.compressed and self.rocm and self.engine.compressed_rocm_arches:
            return "none"  # its C4 path on ROCm reads no budget (plan.paths.SglangC4Hip)
        if self.compressed and self.engine.compressed_budget_rule is not None:
            return self.engine.compressed_budget_rule
        return self.engine.budget_rule

    def for_call(self, rows: int, cols: int, free_bytes: int | None = None) -> int | None:
        """The budget an indexer call over ``rows`` x ``cols`` logits plans with, under the
        release's ROCm cap where it runs on ROCm (each place SGLang reads its budget caps it:
        0.5.23 layers/attention/mqa_logits_utils.py:66-67, :88-89)."""
        budget = self._uncapped(rows, cols, free_bytes)
        cap = self.engine.rocm_budget_cap_bytes
        if budget is None or not self.rocm or cap is None:
            return budget
        return min(budget, cap)

    def _uncapped(self, rows: int, cols: int, free_bytes: int | None) -> int | None:
        rule = self.rule
        if rule == "none":
            return None
        if rule == "fixed-mib":
            return budget_bytes_from_mb(self.value)
        if rule == "fixed-elements":
            return int(self.value) * 4  # fp32 logits
        gate = self.engine.chunk_skip_elements
        if gate is not None and rows * cols < gate:
            return None  # the engine does not read free memory for a small call
        if rule == "sglang-cached" and self.cached is not None:
            return self.cached
        if free_bytes is None:
            raise ValueError(f"{self.engine.name} reads free memory for this call: give free_bytes")
        self.readings += 1
        if rule == "sglang-free-per-call":
            return max(1, int(free_bytes * self.value))
        static = sglang_static_budget(self.total_bytes, self.mem_fraction_static, self.value)
        if rule == "sglang-capped-per-call":  # mqa_logits_budget_bytes(allow_sync=True), every forward
            return max(1, min(int(free_bytes * self.value), static))
        self.cached = max(1, min(int(free_bytes * self.value), static))
        return self.cached


def profile_run_logits_bytes(engine, value: float | None = None, model=None, worst_decode_tokens: int = 0,
                             max_model_len: int | None = None, decode_columns: int | None = None) -> int:
    """What the release's profile (dummy) run allocates for the indexer's logits, so that the
    KV cache is sized to leave it free: vLLM from 0.19.0 a ``torch.empty`` of
    ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` (``value``; default the release's), one chunk's
    worth; 0 for the releases whose profile run reserves no logits.  ``model`` (a preset): a QSA
    model's indexer (Qwen3.8-Flash-Next) reserves none in vLLM 0.33.0, whose profile run builds no
    attention metadata (v1/worker/gpu_model_runner.py:6132-6133, :5637), so its QSA indexer
    returns before any logits (models/qwen4_exp/nvidia/indexer_qsa.py:198-205, :257-273) and the
    DeepSeek indexer's reservation (sparse_attn_indexer.py) is not on its path.  A pooled model
    (GLM-5.3-Flash) on a release with ``pooled_decode_reservation`` reserves the larger of that and
    its worst decode step's logits (``worst_decode_tokens`` rows of ``max_model_len // 4`` pools,
    the model's max_model_len by default; ``decode_columns``: another width, as a build before the
    release sized them in pools did)."""
    profile = get_engine(engine)
    if not profile.dummy_logits_reservation or getattr(model, "qsa", False):
        return 0
    budget = budget_bytes_from_mb(profile.budget_default if value is None else value)
    if profile.pooled_decode_reservation and getattr(model, "pooled", False):
        # vLLM 0.33.0's kpool path: the larger of the budget and the worst decode step's fp32
        # logits, [min(max_num_seqs x (1 + drafts), max_num_batched_tokens), max_model_len // 4]
        # (the caller gives that min as ``worst_decode_tokens``)
        if decode_columns is None:
            decode_columns = (model.max_model_len if max_model_len is None else max_model_len) // model.kv_ratio
        return max(budget, worst_decode_tokens * decode_columns * FP32_BYTES)
    return budget


def process_budget(engine, free_bytes: int | None = None, total_bytes: int | None = None,
                   mem_fraction_static: float | None = SGLANG_MEM_FRACTION_STATIC,
                   value: float | None = None, compressed: bool = False, rocm: bool = False) -> int | None:
    """The budget a release plans every large step with, in a process that first measured
    ``free_bytes`` free: vLLM's MiB (``value``, default the release's; none before 0.19.0);
    TensorRT-LLM's elements per call, as fp32 bytes;
    SGLang's own rule (``value``: its free-memory fraction) on a GPU of ``total_bytes``
    (default: an H200).  ``compressed``: the budget of the release's path for compressed K
    (DeepSeek-V4's C4 indexer) where it has one of its own; ``rocm``: on a ROCm GPU (its cap)."""
    profile = get_engine(engine)
    if not profile.budget_rule.startswith("sglang"):
        return EngineBudget(profile, value, rocm=rocm).for_call(1, 1)
    if free_bytes is None:
        raise ValueError(f"{profile.name} measures its logits budget from free memory: give free_bytes")
    total = total_bytes if total_bytes is not None else get_gpu("h200").capacity_bytes
    budget = EngineBudget(profile, value, total, mem_fraction_static, compressed, rocm)
    return budget.for_call(profile.chunk_skip_elements or 1, 1, free_bytes)
