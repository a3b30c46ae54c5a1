"""Stage ``correctness``: deepgemm against the reference backend on fresh random
inputs for several shapes: relative difference of the logits inside each row's
window, equality of the top-k sets, and the GPU top-k against the reference
top-k on the same logits (that one must agree exactly)."""
from __future__ import annotations

import math

import torch

from ...memory import make_plan
from ...run.inputs import make_inputs
from ...run.kernels.reference import ReferenceBackend
from ...run.metadata import chunk_windows, kv_slots
from .config import TOPK


def _windows(plan_chunk_batch, chunk, device):
    hks, hke = chunk_windows(plan_chunk_batch, chunk)
    return (torch.from_numpy(hks).to(device), torch.from_numpy(hke).to(device)), (hks, hke)


def stage_correctness(ctx) -> list[dict]:
    """One chunk per shape (all rows, full layout): deepgemm vs reference."""
    rows = []
    for i, step in enumerate(ctx.cfg.correctness):
        ctx.clock.check()
        seed = ctx.seed + i
        batch = step.batch
        inputs = make_inputs(batch, step.model, seed=seed, device=ctx.device)
        ref = ReferenceBackend(ctx.backend.deepgemm_version if ctx.backend.rules.full_width else "2.6")
        if not getattr(ctx.backend, "supports_full", True):  # DeepGEMM 2.8: compressed rows only
            layouts = [("compressed", True)]
        else:
            layouts = [("full", False)] + \
                ([("compressed", True)] if getattr(ctx.backend, "supports_compressed", False) else [])
        plan = make_plan(batch, "n-only", None, ref.plan_settings(step.model))
        chunk = plan.chunks[0]
        (ks, ke), host = _windows(batch, chunk, ctx.device)
        slots = torch.from_numpy(kv_slots(batch, chunk).astype("int64")).to(ctx.device)
        k = inputs.k_cache.view(torch.uint8)[slots].view(torch.float8_e4m3fn)
        s = inputs.k_cache_scale[slots]
        q = inputs.q[chunk.token_start:chunk.token_end]
        w = inputs.weights[chunk.token_start:chunk.token_end]
        for layout, compressed in layouts:
            width = int((host[1] - host[0]).max()) if compressed else k.shape[0]
            got = ctx.backend.logits(q, k, s, w, ks, ke, width, compressed, host_windows=host)
            want = ref.logits(q, k, s, w, ks, ke, width, compressed, host_windows=host)
            lens = host[1] - host[0]
            cols = torch.arange(width, device=ctx.device)
            lo = torch.zeros_like(ks) if compressed else ks
            hi = (ke - ks) if compressed else ke
            inside = (cols[None, :] >= lo[:, None].long()) & (cols[None, :] < hi[:, None].long())
            g64 = torch.where(inside, got.double(), 0.0)
            w64 = torch.where(inside, want.double(), 0.0)
            diff_num = float(((g64 - w64) ** 2).sum())
            diff_den = float((w64 ** 2).sum())
            per_row = ((g64 - w64) ** 2).sum(1).sqrt() / (w64 ** 2).sum(1).sqrt().clamp_min(1e-30)
            worst_row = float(per_row.max())
            nan = bool(torch.isnan(torch.where(inside, got, 0.0)).any())
            del g64, w64, inside
            m = q.shape[0]
            out_dg = torch.full((m, TOPK), -1, dtype=torch.int32, device=ctx.device)
            out_ref_same = out_dg.clone()
            out_ref = out_dg.clone()
            ref.topk(got.clone(), ks, ke, TOPK, compressed, out=out_ref_same, host_windows=host)
            ctx.backend.topk(got, ks, ke, TOPK, compressed, out=out_dg, host_windows=host)
            ref.topk(want, ks, ke, TOPK, compressed, out=out_ref, host_windows=host)
            same_logits_equal = bool(torch.equal(out_dg, out_ref_same))
            set_equal = _sets_equal(out_dg, out_ref)
            rel = math.sqrt(diff_num / diff_den) if diff_den else 0.0
            rows.append({
                "shape": step.name, "model": step.model, "layout": layout, "rows": m, "kv": k.shape[0],
                "width": width, "seed": seed, "mean_window": round(float(lens.mean()), 1),
                "rel_diff": rel, "worst_row_rel_diff": worst_row, "nan_in_window": nan,
                "topk_rows_equal_sets": set_equal, "topk_rows": m,
                "gpu_topk_equals_reference_topk": same_logits_equal,
                "status": "ok" if (rel < 2e-3 and not nan and same_logits_equal) else "FAIL",
            })
            del got, want
        del inputs, k, s
    return rows


def _sets_equal(a: torch.Tensor, b: torch.Tensor) -> int:
    """Rows whose index sets agree (order ignored, -1 padding included)."""
    sa, _ = torch.sort(a, dim=1)
    sb, _ = torch.sort(b, dim=1)
    return int((sa == sb).all(dim=1).sum())
