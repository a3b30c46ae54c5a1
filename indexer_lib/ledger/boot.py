"""What the indexer reserves when the server starts (the ledger's ``boot`` lines).

Each line is the memory model's own figure for the server's settings (``memory.memory_report``
of a plan under them: the K workspace the release sizes from ``--max-model-len``, the top-k output
of ``max_num_batched_tokens`` rows) or the release's profile-run rule
(``engines.profile_run_logits_bytes``), with the source its profile names.
"""
from __future__ import annotations

from ..dtypes import INT32_BYTES
from ..engines import profile_run_logits_bytes
from ..memory.replayed import workspace_path_bytes
from .lines import LedgerLine

PROJECT_WORKSPACE = "assumed: no engine named, the K workspace of vLLM's rule (40 x max_model_len tokens)"


HELD = ("K workspace", "top-k output buffer")  # the boot lines the server allocates and keeps


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
