"""Stage ``probe``: which DeepGEMM was found and the padding it really allocates
(row stride and rows of tiny calls, against ``indexer_lib.padding``); the first
calls' time (JIT compilation) is recorded apart."""
from __future__ import annotations

import time

from .common import sync


def stage_probe(ctx) -> list[dict]:
    from ...run.kernels.deepgemm import DeepGemmBackend, probe_padding

    rows = []
    be = ctx.backend
    if not isinstance(be, DeepGemmBackend):
        return [{"layout": "-", "heads": h, "status": "skipped: reference backend (dry run)"} for h in (64, 32)]
    for heads in (64, 32):
        ctx.clock.check()
        t0 = time.perf_counter()
        res = probe_padding(be, heads, ctx.device)
        sync(ctx.device)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        probe_padding(be, heads, ctx.device)
        sync(ctx.device)
        again_s = time.perf_counter() - t0
        for layout, r in res["layouts"].items():
            rows.append({"layout": layout, "heads": heads, "status": "ok" if r["agrees"] else "MISMATCH",
                         "row_stride": r["row_stride"], "rows_allocated": r["rows_allocated"],
                         "rules_claimed": res["expected"], "rules_matching": " ".join(r["rules_matching"]),
                         "first_calls_s": round(first_s, 3), "warm_calls_s": round(again_s, 4)})
    return rows
