"""A modelled time for a chunk plan on an H200: explicit, documented, labelled modelled.

Per chunk: a fixed cost + logits FLOPs at a stated rate + bytes at a stated
bandwidth + a top-k cost per scored logit.  The constants come from published
figures, read from ``data/field/`` (docs/design.md#time-model); nothing here was
measured:

- fixed cost per chunk: ``chunk_overhead.csv`` ("9 chunks -> 1 cut 402 us to
  37.7 us" on one small shape), so one extra chunk costs (402 - 37.7) / 8 = 45.5 us;
- logits: DeepGEMM's MQA-logits kernel at 1000 TFLOP/s, a round figure inside the
  published 960-1145 (``kernel_rates.csv``), counting 2 * H * D FLOPs per scored
  logit (sum over rows of ke - ks);
- bytes at the H200's HBM bandwidth (``kernel_rates.csv``, 4.8 TB/s): each scored
  logit written once and read once by top-k (8 bytes), each gathered K token read
  and written (2 x (D + 4) bytes);
- top-k: what remains of the longest published causal prefill
  (``h200_indexer_prefill.csv``: 64K tokens, H = 64, one chunk, 114.7 ms) after
  the three terms above, per scored logit.  The same constants give 28.7 ms at
  32K (published 28.4) and 7.2 ms at 16K (published 6.5).

When measured H200 sweep tables exist under ``data/h200/`` (rows with
``mode == "measure"`` and a ``time_ms``), ``TimeModel.from_data`` fits the
per-chunk cost and the top-k cost to them instead, and says so in ``source``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..plan import Plan, PlanSettings, plan_at
from ..plan.features import chunk_useful_elements, plan_features  # noqa: F401  (the time model's inputs)
from ..refdata import data_path, number, read_rows
from ..shapes import K_SCALE_BYTES, get_model
from ..workload import StepBatch

PUBLISHED_SOURCE = ("modelled: published figures (DeepGEMM's rates, H200 prefill times, a GB300 chunk-count "
                    "measurement of another indexer; docs/design.md#time-model), not measured")
MEASURED_DIR = data_path("h200")
LOGITS_TFLOPS = 1000.0  # a round figure inside the published range (checked by the tests)
HEAD_DIM = 128  # D of both models (shapes.MODELS)


def published_prefill_ms() -> list[dict]:
    """The published single-sequence indexer prefill times on an H200, shortest first."""
    rows = [{k: number(v) if k in ("tokens", "index_heads", "head_dim", "ms") else v for k, v in r.items()}
            for r in read_rows("field", "h200_indexer_prefill.csv")]
    return sorted(rows, key=lambda r: r["tokens"])


def published_rate(quantity: str) -> float:
    """One figure of ``data/field/kernel_rates.csv`` by name."""
    for r in read_rows("field", "kernel_rates.csv"):
        if r["quantity"] == quantity:
            return float(r["value"])
    raise KeyError(f"{quantity!r}: not in data/field/kernel_rates.csv")


def published_chunk_cost_us() -> float:
    """The cost of one extra chunk: the published chunk-count change and its time change."""
    (r,) = read_rows("field", "chunk_overhead.csv")
    return (float(r["us_before"]) - float(r["us_after"])) / (int(r["chunks_before"]) - int(r["chunks_after"]))


PER_CHUNK_US = published_chunk_cost_us()
HBM_TBPS = published_rate("hbm_bandwidth")


@dataclass(frozen=True)
class TimeModel:
    per_chunk_us: float = PER_CHUNK_US
    logits_tflops: float = LOGITS_TFLOPS
    hbm_tbps: float = HBM_TBPS
    topk_ps_per_element: float = 0.0  # set by published() or from_data()
    source: str = PUBLISHED_SOURCE

    def _fixed_terms_ms(self, f: dict) -> float:
        """Everything except the fitted terms (per-chunk cost and top-k)."""
        flops = 2 * f["heads"] * HEAD_DIM * f["useful_elements"]
        moved = 8 * f["useful_elements"] + 2 * f["gathered_kv_tokens"] * f["k_bytes_per_token"]
        return flops / (self.logits_tflops * 1e12) * 1e3 + moved / (self.hbm_tbps * 1e12) * 1e3

    def features_ms(self, f: dict) -> float:
        return (f["chunks"] * self.per_chunk_us * 1e-3 + self._fixed_terms_ms(f)
                + f["useful_elements"] * self.topk_ps_per_element * 1e-9)

    def plan_ms(self, plan: Plan) -> float:
        return self.features_ms(plan_features(plan))

    @classmethod
    def published(cls) -> "TimeModel":
        """Constants from the published figures; top-k from the longest published prefill."""
        base = cls()
        anchor = published_prefill_ms()[-1]
        f = _one_sequence_features(anchor["tokens"], anchor["index_heads"], anchor["head_dim"])
        rest_ms = anchor["ms"] - base.per_chunk_us * 1e-3 - base._fixed_terms_ms(f)
        return replace(base, topk_ps_per_element=rest_ms * 1e9 / f["useful_elements"])

    @classmethod
    def from_data(cls, data_dir: str | Path = MEASURED_DIR) -> "TimeModel":
        """Fit the per-chunk and top-k costs to measured rows, else the published model."""
        rows = load_measured(data_dir)
        needed = {"time_ms", "worst_chunks", "worst_useful_elements", "worst_gathered_kv_tokens",
                  "model"}
        if rows is None or not needed <= set(rows.columns) or len(rows) < 2:
            return cls.published()
        import numpy as np

        base = cls()
        xs, ys = [], []
        for r in rows.itertuples(index=False):
            model = get_model(r.model)
            f = {"chunks": r.worst_chunks, "useful_elements": r.worst_useful_elements,
                 "gathered_kv_tokens": r.worst_gathered_kv_tokens, "heads": model.index_heads,
                 "k_bytes_per_token": model.k_bytes_per_token}
            xs.append([r.worst_chunks * 1e-3, r.worst_useful_elements * 1e-9])
            ys.append(r.time_ms - base._fixed_terms_ms(f))
        (per_chunk, topk), *_ = np.linalg.lstsq(np.array(xs), np.array(ys), rcond=None)
        if per_chunk < 0 or topk < 0:  # measurements the model cannot explain: keep published
            return cls.published()
        return replace(base, per_chunk_us=float(per_chunk), topk_ps_per_element=float(topk),
                       source=f"fitted to {len(rows)} measured H200 steps in {data_dir}")


def _one_sequence_features(n: int, heads: int, head_dim: int) -> dict:
    """One causal sequence of n tokens prefilled in one chunk."""
    return {"chunks": 1, "gathers": 1, "useful_elements": n * (n + 1) // 2,
            "gathered_kv_tokens": n, "heads": heads, "k_bytes_per_token": head_dim + K_SCALE_BYTES}


def load_measured(data_dir: str | Path = MEASURED_DIR):
    """Measured sweep rows (``mode == "measure"``, not OOM, timed) under ``data_dir``, or None."""
    import pandas as pd

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        return None
    frames = []
    for path in sorted(data_dir.rglob("*")):
        if path.suffix == ".parquet":
            frames.append(pd.read_parquet(path))
        elif path.suffix == ".csv":
            frames.append(pd.read_csv(path))
    frames = [f for f in frames if {"mode", "time_ms"} <= set(f.columns)]
    if not frames:
        return None
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[(rows["mode"] == "measure") & rows["time_ms"].notna()]
    if "oom" in rows.columns:
        rows = rows[~rows["oom"].astype(bool)]
    return rows if len(rows) else None


def overhead_table(batch: StepBatch, strategies, budgets_mb, settings: PlanSettings,
                   time_model: TimeModel | None = None):
    """Per strategy x budget on one step: chunks, gathers, peak logits and modelled time,
    with the overhead against the same step in one chunk per workspace (``n-only``)."""
    import pandas as pd

    from ..memory import memory_report

    tm = time_model or TimeModel.published()
    base_ms = tm.plan_ms(plan_at(batch, "n-only", None, settings))
    rows = []
    for strategy in strategies:
        for mb in budgets_mb:
            plan = plan_at(batch, strategy, mb, settings)
            f = plan_features(plan)
            ms = tm.features_ms(f)
            rows.append({
                "model": settings.model, "engine": settings.engine or "",
                "strategy": strategy, "budget_mb": mb, "chunks": f["chunks"],
                "gathers": f["gathers"],
                "peak_transient_bytes": memory_report(plan).peak_transient,
                "allocated_logits_bytes": f["allocated_logits_bytes"],
                "useful_logits_bytes": 4 * f["useful_elements"],
                "time_ms": ms, "overhead": ms / base_ms - 1.0,
                "time_source": "modelled", "time_model": tm.source,
            })
    return pd.DataFrame(rows)
