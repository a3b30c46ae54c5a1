"""The what-if prefill logits buffers of a deployment (``plan.logits_buffer``): which release
paths take each, its sizes from the server's (the budget, ``--max-model-len``), the boot line a
pooled buffer holds, and the name it carries wherever a number is shown; and the decode budget
users ask for, which no release the project profiles has."""
from __future__ import annotations

from ..checks import BadValue
from ..elementwise import cdiv
from ..plan.logits_buffer import KINDS, LogitsBuffer
from ..plan.paths import SglangC4, SglangRows, VllmChunker, release_path
from ..presets import MIB, format_bytes
from .lines import LedgerLine

# SGLang's pooled buffer on its AMD FP4 indexer: SGLANG_DSV4_FP4_LOGITS_BUDGET_MB, default 2048
# (sglang 0.5.23 python/sglang/srt/environ.py:1101; 0.5.20-0.5.22 read it with os.environ, 2048)
SGLANG_POOL_MIB = 2048
POOL_SOURCE = ("sglang 0.5.23 python/sglang/kernels/ops/attention/dsv4/fp4_indexer_hip.py:62-67 (_LOGITS_POOL, "
               "SGLANG_DSV4_FP4_LOGITS_BUDGET_MB x 2**20 // 4 fp32 elements, environ.py:1101 default 2048), "
               ":217-220 (logits_rows_per_chunk: max(1, elements // width)), :223-257 (_alloc_logits: a prefill "
               "launch within the buffer is a view of it, allocated once per device and never freed; "
               "sgl-project/sglang#37660; in the installed SGLang 0.5.20-0.5.23, not 0.5.17, 0.5.18-0.5.19 not "
               "read; the HIP FP4 indexer alone)")
FIXED_SOURCE = ("assumed from vllm-project/vllm#58068 (open, in no release) as its description reads: the "
                "prefill logits at one fixed width so that a long prefill reuses the allocator's block; width "
                "and rows are the project's reading (the widest window at max_model_len, rows within the budget)")

# the decode logits budget users ask for: proposed for vLLM's ROCm decode path alone
# (vllm-project/vllm#43327, open); these releases' vllm/envs.py hold no such variable (a test greps
# the installed ones), and 0.33.0's decode path, as its profile reads it, calls the paged logits
# unbudgeted on every decode step
DECODE_BUDGET_ENV = "VLLM_SPARSE_INDEXER_DECODE_MAX_MB"
DECODE_BUDGET_READ = ("0.15.1", "0.19.0", "0.20.0", "0.30.0", "0.32.0")


def decode_budget_note() -> str:
    """One line: no release the project profiles budgets its decode logits."""
    return (f"{DECODE_BUDGET_ENV}: in no release (vllm {', '.join(DECODE_BUDGET_READ)} envs.py read, 0.33.0's "
            "decode path as its profile reads it; proposed for ROCm in vllm-project/vllm#43327, open): the decode "
            "logits stay unbudgeted, the ledger's decode line as shown")


def buffer_refusal(kind: str, settings) -> str | None:
    """Why the release path of these settings (as the engine's own chunker runs them) takes no
    such buffer; None where it does."""
    if kind not in KINDS:
        return f"logits_buffer {kind!r}: must be one of {', '.join(KINDS)}"
    path, profile = release_path(settings), settings.profile
    if kind == "fixed-width":
        if not isinstance(path, VllmChunker) or path.budget_read != "given" or settings.rules.full_width:
            return (f"logits_buffer fixed-width: modelled on vLLM's budgeted chunker with DeepGEMM's compressed "
                    f"layout alone (vllm==0.33.0), the base vllm-project/vllm#58068 changes, not {profile.name}'s "
                    f"{path.name} path")
        return None
    if not (isinstance(path, (VllmChunker, SglangRows, SglangC4)) and path.budget_read == "given"):
        return (f"logits_buffer pooled: modelled on vLLM's budgeted chunker and SGLang's budgeted row paths, not "
                f"{profile.name}'s {path.name} path")
    return None


def what_if_buffer(kind: str | None, strategy, settings, budget: int | None, max_model_len: int):
    """(the ``LogitsBuffer``, the boot line a pooled one holds) for the server's ``logits_buffer``
    (None: (None, None)); BadValue where the run's path takes none."""
    if kind is None:
        return None, None
    if not strategy.own_build:
        raise BadValue("logits_buffer", f"logits_buffer {kind}: a what-if of the release's own path (strategy "
                                        f"engine), not strategy {strategy.name}")
    settings = strategy.runs_under(settings)
    why = buffer_refusal(kind, settings)
    if why:
        raise BadValue("logits_buffer", why)
    if kind == "fixed-width":
        if budget is None:
            raise BadValue("logits_buffer", "logits_buffer fixed-width: its rows come from the logits budget, "
                                            "none given")
        return LogitsBuffer(kind, budget, cdiv(max_model_len, settings.preset.kv_ratio)), None
    pool = budget if settings.profile.engine == "vllm" else SGLANG_POOL_MIB * MIB
    buffer = LogitsBuffer(kind, pool)
    where = (f"the project's what-if on {settings.profile.name}'s {release_path(settings).name} path, sized "
             + ("to its logits budget" if settings.profile.engine == "vllm" else "as SGLang's FP4 path"))
    line = LedgerLine("boot", "pooled prefill logits buffer", pool, f"{POOL_SOURCE}; {where}; assumed: allocated at "
                      "the first prefill, beyond what the KV cache left, and each launch's logits dead before the "
                      "next launch's (one view at a time)",
                      f"{format_bytes(pool)} fp32, every prefill launch's logits a view of it; held from the first "
                      "prefill on: taken from the memory free when a step runs")
    return buffer, line


def buffer_text(buffer: LogitsBuffer) -> str:
    """The buffer as a setting that differs from the release's, for every figure shown with it."""
    if buffer.kind == "fixed-width":
        return (f"prefill logits at a fixed width of {buffer.width:,} columns, at most "
                f"{buffer.rows_for(buffer.width):,} rows a launch (vllm-project/vllm#58068, open; the release's: "
                "each chunk's own width)")
    return (f"a pooled prefill logits buffer of {format_bytes(buffer.budget)} (the project's what-if, on "
            "sgl-project/sglang#37660's rule for SGLang's AMD FP4 indexer; the release's: a new allocation per "
            "launch)")
