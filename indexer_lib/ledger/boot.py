"""What the indexer reserves when the server starts (the ledger's ``boot`` lines).

Each line is the memory model's own figure for the server's settings (``memory.memory_report``
of a plan under them: the K workspace the release sizes from ``--max-model-len``, the top-k output
of ``max_num_batched_tokens`` rows), the release's profile-run rule
(``engines.profile_run_logits_bytes``) or, on ROCm, the decode logits vLLM 0.33.0's profile run
puts in the workspace (``rocm_decode_workspace_bytes``), with the source its profile names.
"""
from __future__ import annotations

from ..dtypes import FP32_BYTES, INT32_BYTES
from ..engines import profile_run_logits_bytes
from ..memory.decode import decode_logits_bytes, decode_logits_cols, decode_step_bytes
from ..memory.replayed import workspace_path_bytes
from ..elementwise import cdiv
from ..padding import align, get_rules
from .lines import LedgerLine

PROJECT_WORKSPACE = "assumed: no engine named, the K workspace of vLLM's rule (40 x max_model_len tokens)"


ROCM_DECODE = "ROCm decode logits in the workspace"
HELD = ("K workspace", "top-k output buffer", ROCM_DECODE)  # the boot lines the server allocates and keeps


def boot_events(lines) -> list[tuple]:
    """The buffers the boot lines hold, as allocator events (the profile run's reservation is
    left free, not held)."""
    return [("malloc", f"boot/{line.name}", line.bytes) for line in lines if line.name in HELD and line.bytes]


def boot_lines(plan, report, max_model_len: int, worst_decode_tokens: int = 0,
               budget_mb: float | None = None) -> list[LedgerLine]:
    """The boot lines of a server whose steps are planned as ``plan`` (its settings at the server's
    ``max_model_len``) with ``report`` (its memory report, the top-k buffer at the server's
    ``max_num_batched_tokens`` rows); ``worst_decode_tokens``: min(max_num_seqs x (1 + drafts),
    max_num_batched_tokens); ``budget_mb``: the release's logits knob as the server sets it (None:
    its default)."""
    settings, profile = plan.settings, plan.settings.profile
    sources = profile.sources if profile is not None else {}
    lines = []
    if report.workspace:
        unit = "entries" if settings.preset.kv_ratio != 1 else "tokens"
        model = settings.preset
        # the workspace manager's buffer as the release asks for it (each part rounded up, and what
        # its profile run adds), where the release is named; else the memory model's K and scales
        workspace = report.workspace if profile is None else workspace_path_bytes(
            profile, plan.workspace_tokens, model.head_dim, model.k_bytes_per_token - model.head_dim)
        extra = ""
        if profile is not None and profile.workspace_extra_bytes:
            extra = (f"; with {profile.workspace_extra_bytes:,} B the profile run adds "
                     f"({sources.get('workspace_extra_bytes', 'not sourced')})")
        lines.append(LedgerLine("boot", "K workspace", workspace,
                                sources.get("workspace_factor", PROJECT_WORKSPACE) + extra,
                                f"{plan.workspace_tokens:,} {unit} at max_model_len {max_model_len:,}"))
    rocm = _rocm_decode_line(plan, lines[0].bytes if lines else 0, worst_decode_tokens, max_model_len)
    if rocm is not None:
        lines.append(rocm)
    if report.topk_buffer:
        lines.append(LedgerLine("boot", "top-k output buffer", report.topk_buffer,
                                sources.get("topk_output", "assumed: [max_num_batched_tokens, top-k] int32"),
                                f"{report.topk_buffer // (INT32_BYTES * settings.preset.topk):,} rows x "
                                f"top-{settings.preset.topk} int32"))
    if profile is not None:
        reserved = profile_run_logits_bytes(profile, budget_mb, settings.preset, worst_decode_tokens, max_model_len)
        if reserved:
            pooled = profile.pooled_decode_reservation and settings.preset.pooled
            source = sources.get("pooled_decode_reservation" if pooled else "dummy_logits_reservation", "")
            lines.append(LedgerLine("boot", "profile run's logits reservation", reserved, source,
                                    "left free for a step's logits: the KV cache is sized without it"))
    return lines


def rocm_decode_columns(settings, max_model_len: int) -> int:
    """The columns of the decode logits vLLM's ROCm profile run sizes: the indexer's max_model_len,
    in entries for compressed K (vLLM 0.33.0 deepseek_v4/attention.py:1010-1012)."""
    return max_model_len // settings.preset.kv_ratio


def rocm_decode_workspace_bytes(settings, rows: int, max_model_len: int) -> int:
    """What vLLM's ROCm profile run asks the shared workspace for, for the decode logits:
    ``rows`` x ``rocm_decode_columns`` fp32, rounded up as the workspace manager rounds each buffer
    (``rocm_decode_workspace`` in the release's profile)."""
    columns = rocm_decode_columns(settings, max_model_len)
    return align(rows * columns * FP32_BYTES, settings.profile.workspace_align)


def _rocm_decode_line(plan, workspace: int, rows: int, max_model_len: int) -> LedgerLine | None:
    """On a ROCm GPU, where the release's profile run sizes the decode logits in the workspace
    (``rows``: min(max_num_batched_tokens, max_num_seqs x (1 + drafts))): what they grow the
    buffer by past the K workspace (``workspace`` bytes), which shares it; None elsewhere."""
    settings = plan.settings
    profile = settings.profile
    if profile is None or not profile.rocm_decode_workspace or not rows or not settings.gpu_preset.rocm:
        return None
    asked = rocm_decode_workspace_bytes(settings, rows, max_model_len)
    return LedgerLine("boot", ROCM_DECODE, max(0, asked - workspace), profile.sources["rocm_decode_workspace"],
                      f"{rows:,} rows x {rocm_decode_columns(settings, max_model_len):,} columns fp32, {asked:,} B asked of the workspace the "
                      f"K workspace shares (it keeps the larger): what they add past it")


def graph_buckets(max_bs: int) -> list[int]:
    """SGLang's prefill CUDA-graph buckets, captured token counts up to ``max_bs``
    (generate_prefill_cuda_graph_batch_sizes, sglang 0.5.23 arg_groups/cuda_graph_hook.py:480-497)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def prefill_graph_line(settings, max_bs: int, max_model_len: int, drafts: int,
                       max_context: int | None = None) -> LedgerLine:
    """The C4 logits SGLang's breakable prefill CUDA graph captures for DeepSeek-V4 into its graph
    pool: the largest bucket's rows (``max_bs``: chunked_prefill_size) x the captured context's
    paged columns, ceil(width / 256) x 64, as DeepGEMM's paged kernel allocates them
    (``memory.decode.decode_logits_bytes``); the width is ``max_context`` rounded up to 256 where
    --cuda-graph-prefill-max-context is set, else the request-to-token row (max_model_len + 4 +
    drafts).  The pool keeps the largest capture's logits: captures run largest first and each
    frees its logits after top-k, so later ones reuse the block (assumed; one block, no copy per
    stream)."""
    profile = settings.profile
    page = profile.compressed_page_tokens
    width = align(max_context, page) if max_context is not None else max_model_len + 4 + drafts
    cols = cdiv(width, page) * (page // settings.preset.kv_ratio)
    rows = max(graph_buckets(max_bs))
    nbytes = int(decode_logits_bytes(rows, cols, get_rules(profile.deepgemm_rules)))
    bound = (f"--cuda-graph-prefill-max-context {max_context:,}" if max_context is not None
             else "no --cuda-graph-prefill-max-context: the model's context")
    return LedgerLine("boot", "prefill CUDA graph's C4 logits", nbytes,
                      profile.sources["compressed_prefill_graph"] + "; assumed: the pool keeps one largest "
                      "capture's logits, and the eager warm-ups' same-size logits are given back before steps run",
                      f"{rows:,} rows (largest bucket) x {cols:,} columns fp32 ({bound}); held in the graph pool "
                      "outside --mem-fraction-static: taken from the memory free when a step runs")


def decode_graph_line(settings, max_bs: int, max_model_len: int, drafts: int) -> LedgerLine | None:
    """The paged logits SGLang's decode CUDA graph captures into its graph pool: its largest
    captured batch (``max_bs`` requests, each with its drafts) at the static page table's width,
    the same rule as an eager decode step's (``memory.decode.decode_step_bytes``); None where the
    release's decode path is not read.  The pool keeps the largest capture's logits: captures run
    largest first so that smaller ones reuse its blocks."""
    tokens = max_bs * (1 + drafts)
    nbytes = decode_step_bytes(settings, tokens, max_model_len, drafts)
    if not nbytes:
        return None
    profile = settings.profile
    cols = decode_logits_cols(profile, settings.preset, max_model_len, drafts)
    return LedgerLine("boot", "decode CUDA graph's paged logits", nbytes,
                      f"{profile.sources['decode_cuda_graph']}; {profile.sources['decode_logits_cols']}",
                      f"{tokens:,} decode tokens ({max_bs:,} requests, the largest captured batch) x {cols:,} columns "
                      "fp32; held in the graph pool outside --mem-fraction-static: taken from the memory free when a "
                      "step runs")
