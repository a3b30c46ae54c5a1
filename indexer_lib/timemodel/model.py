"""A modelled time for a chunk plan, kernel by kernel: explicit, documented, labelled modelled.

A release's chunk loop launches, per chunk, the K gather (when the chunk gathers), DeepGEMM's
MQA logits, DeepGEMM's ``clean_logits`` (releases that ask for it) and the top-k kernel; each
kernel's time comes from its work on the GPU (``kernel_rates``: tiles and waves over the SMs,
bytes at the HBM bandwidth), with every constant sourced, fitted to published kernel timings
or labelled "assumed" (``data/field/time_constants.csv``, docs/design.md#time-model).

The host issues each kernel (``host_us_per_call``, assumed) while the GPU runs the earlier
ones: one layer's indexer lasts as long as the slower of the two streams.  A step's indexer
time is one layer's times the model's layers that compute an indexer.  Nothing here was
measured: every number is modelled, and the spread of the published checks gives a band.

When measured H200 sweep rows exist under ``data/h200/`` (``mode == "measure"`` with a
``time_ms`` and the modelled ``model_time_ms`` beside it), ``TimeModel.from_data`` fits one
factor on the modelled time to them and says so in ``source``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from ..plan import Plan, PlanSettings
from ..memory import plan_at
from .features import plan_features
from .work import FEW_CHUNKS, chunk_work
from ..refdata import data_path
from ..presets import get_gpu
from ..workload import PrefillRequest, StepBatch
from . import kernel_rates as kr

PUBLISHED_SOURCE = ("modelled: per kernel from its work on the GPU, constants fitted to published kernel "
                    "timings (DeepGEMM's test on an H200; vLLM's top-k and DeepGEMM's logits on an H20) or "
                    "assumed, the band from the published checks on the GPU (docs/design.md#time-model); "
                    "not measured")
MEASURED_DIR = data_path("h200")


@dataclass(frozen=True)
class ChunkTime:
    kernels: dict  # microseconds per kernel launched (``timemodel.kernel_rates.KERNELS``)
    host_us: float  # the host's time to issue them

    @property
    def gpu_us(self) -> float:
        return sum(self.kernels.values())

    def to_json(self) -> dict:
        return {"kernels": {k: round(v, 3) for k, v in self.kernels.items()},
                "total_us": round(self.gpu_us, 3), "host_us": round(self.host_us, 3)}


@dataclass(frozen=True)
class LayerTime:
    """One layer's indexer over a step, and the step's over the model's indexer layers."""

    chunks: tuple[ChunkTime, ...]
    indexer_layers: int
    scale: float = 1.0  # a factor fitted to measured rows (1.0: the published constants)
    band: dict = field(default_factory=dict)  # per kernel (low, high) multipliers

    @property
    def gpu_us(self) -> float:
        return sum(c.gpu_us for c in self.chunks)

    @property
    def host_us(self) -> float:
        return sum(c.host_us for c in self.chunks)

    @property
    def bound(self) -> str:
        return "host" if self.host_us > self.gpu_us else "gpu"

    @property
    def total_us(self) -> float:
        return self.scale * max(self.gpu_us, self.host_us)

    @property
    def step_us(self) -> float:
        return self.total_us * self.indexer_layers

    def kernel_us(self, kernel: str) -> float:
        return sum(c.kernels.get(kernel, 0.0) for c in self.chunks)

    def bounds_us(self) -> tuple[float, float]:
        """The layer's time at the low and high ends of the published checks' spread."""
        lo = sum(self.kernel_us(k) * self.band.get(k, (1.0, 1.0))[0] for k in kr.KERNELS)
        hi = sum(self.kernel_us(k) * self.band.get(k, (1.0, 1.0))[1] for k in kr.KERNELS)
        return self.scale * max(lo, self.host_us), self.scale * max(hi, self.host_us)


@dataclass(frozen=True)
class TimeModel:
    gpu: str = "h200"
    scale: float = 1.0
    source: str = PUBLISHED_SOURCE

    def layer_time(self, work, *, topk: int, k_bytes_per_token: int, clean: bool,
                   indexer_layers: int = 1) -> LayerTime:
        why = kr.time_refusal(self.gpu)
        if why:  # a GPU whose logits kernel has no published timing: its time is not modelled
            raise ValueError(why)
        gpu, fit = kr.gpu_rates(self.gpu), kr.fitted()
        host_call = kr.constant("host_us_per_call")
        if len(work) > FEW_CHUNKS:  # a plan under a small budget: its chunks' kernels at once
            logits = kr.logits_us_each([w.block_tiles for w in work], gpu, fit).tolist()
            topks = kr.topk_us_each([w.row_lens for w in work], topk, gpu, fit).tolist()
        else:
            logits = [kr.logits_us(w.block_tiles, gpu, fit) for w in work]
            topks = [kr.topk_us(w.row_lens, topk, gpu, fit) for w in work]
        chunks = []
        for w, logits_us, topk_us in zip(work, logits, topks):
            kernels = {}
            if w.gathered_tokens:
                kernels["gather"] = kr.gather_us(w.gathered_tokens, k_bytes_per_token, gpu)
            kernels["logits"] = logits_us
            if clean:
                kernels["clean"] = kr.clean_us(w.outside_cells, gpu, fit)
            kernels["topk"] = topk_us
            chunks.append(ChunkTime(kernels, host_call * len(kernels)))
        return LayerTime(tuple(chunks), indexer_layers, self.scale, kr.error_band(self.gpu))

    def plan_time(self, plan: Plan) -> LayerTime:
        return self.features_time(plan_features(plan))

    def features_time(self, f: dict) -> LayerTime:
        # the chunks' work is computed from the plan each time and not kept: the features of a
        # sweep's steps are cached by the thousand, and the work holds per-row arrays
        work = f["work"] if "work" in f else chunk_work(f["plan"])
        return self.layer_time(work, topk=f["topk"], k_bytes_per_token=f["k_bytes_per_token"],
                               clean=f["clean_logits"], indexer_layers=f["indexer_layers"])

    def features_ms(self, f: dict) -> float:
        """One layer's modelled indexer time, in ms (what the strategy tables compare)."""
        return self.features_time(f).total_us * 1e-3

    def plan_ms(self, plan: Plan) -> float:
        return self.features_ms(plan_features(plan))

    def for_gpu(self, gpu: str) -> "TimeModel":
        """The model whose times a table shows for ``gpu``: this one where it is that GPU's; the
        published model of another GPU whose time is modelled (a factor fitted to measured steps
        belongs to the GPU they were measured on); where the GPU's time is not modelled, the
        reference GPU's time standing in, its ``source`` naming the GPU and why."""
        return _for_gpu(self, get_gpu(gpu).name)

    @property
    def stands_in(self) -> bool:
        """The times are another GPU's, shown for one whose time is not modelled."""
        return STAND_IN in self.source

    @classmethod
    def published(cls, gpu: str = "h200") -> "TimeModel":
        return cls(gpu=gpu)

    @classmethod
    def from_data(cls, data_dir: str | Path = MEASURED_DIR, gpu: str = "h200") -> "TimeModel":
        """One factor on the modelled time, fitted to measured rows; else the published model."""
        rows = load_measured(data_dir)
        if rows is None or "model_time_ms" not in rows.columns:
            return cls.published(gpu)
        rows = rows[rows["model_time_ms"].notna() & (rows["model_time_ms"] > 0)]
        if len(rows) < 2:
            return cls.published(gpu)
        m, t = rows["model_time_ms"].to_numpy(float), rows["time_ms"].to_numpy(float)
        factor = float((m * t).sum() / (m * m).sum())  # least squares through the origin
        return replace(cls.published(gpu), scale=factor,
                       source=f"fitted: the modelled time x {factor:.3f}, fitted to {len(rows)} "
                              f"measured H200 steps in {data_dir}")


STAND_IN = "standing in for"


@lru_cache(maxsize=64)  # asked for every row a table computes
def _for_gpu(model: TimeModel, gpu: str) -> TimeModel:
    why = kr.time_refusal(gpu)
    if why is None:
        return model if gpu == model.gpu else TimeModel.published(gpu)
    base = model if kr.time_refusal(model.gpu) is None else TimeModel.published(kr.REFERENCE_GPU)
    return replace(base, source=f"{base.source}; an {base.gpu.upper()}'s time {STAND_IN} {gpu}: {why}")


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
    """Per strategy x budget on one step: chunks, gathers, peak logits and modelled time per
    kernel, with the overhead against the same step in one chunk per workspace (``n-only``)."""
    import pandas as pd

    from ..memory import memory_report

    tm = (time_model or TimeModel.published()).for_gpu(settings.gpu)
    base = tm.plan_time(plan_at(batch, "n-only", None, settings))
    rows = []
    for strategy in strategies:
        for mb in budgets_mb:
            plan = plan_at(batch, strategy, mb, settings)
            f = plan_features(plan)
            t = tm.features_time(f)
            low, high = t.bounds_us()
            rows.append({
                "model": settings.model, "engine": settings.engine or "",
                "strategy": strategy, "budget_mb": mb, "chunks": f["chunks"],
                "gathers": f["gathers"],
                "peak_transient_bytes": memory_report(plan).peak_transient,
                "allocated_logits_bytes": f["allocated_logits_bytes"],
                "useful_logits_bytes": f["useful_logits_bytes"],
                "time_ms": t.total_us * 1e-3, "time_low_ms": low * 1e-3, "time_high_ms": high * 1e-3,
                **{f"{k}_ms": t.kernel_us(k) * 1e-3 for k in kr.KERNELS},
                "host_ms": t.host_us * 1e-3, "bound": t.bound,
                "step_ms": t.step_us * 1e-3, "indexer_layers": t.indexer_layers,
                "overhead": t.total_us / base.total_us - 1.0,
                "time_source": "modelled", "time_model": tm.source, "time_gpu": tm.gpu,
            })
    return pd.DataFrame(rows)


def chunk_count_check(time_model: TimeModel | None = None) -> dict:
    """The one published chunk-count measurement (``data/field/chunk_overhead.csv``: a GB300 and
    another indexer, QSA, so a check and never a constant) beside the model's cost of one extra
    chunk on the same shape (4 x 4,096 fresh rows, DeepSeek-V3.2's indexer, the latest vLLM)."""
    from ..refdata import read_rows

    (r,) = read_rows("field", "chunk_overhead.csv")
    published = (float(r["us_before"]) - float(r["us_after"])) / (int(r["chunks_before"]) - int(r["chunks_after"]))
    tm = time_model or TimeModel.published()
    batch = StepBatch(tuple(PrefillRequest(0, 4096) for _ in range(4)))
    settings = PlanSettings("deepseek-v3.2")
    one = tm.plan_time(plan_at(batch, "n-only", None, settings))
    many_plan = plan_at(batch, "vllm", 16, settings)
    many = tm.plan_time(many_plan)
    modelled = (many.total_us - one.total_us) / (many_plan.num_chunks - 1)
    # where the GPU's work per chunk is as small as in that run (37.7 us for the whole step), a
    # chunk costs what the host needs to issue it: the model's assumed host time per chunk
    host_per_chunk = many.host_us / many_plan.num_chunks
    return {"published_us_per_extra_chunk": published, "published_gpu": r["gpu"], "published_what": r["what"],
            "modelled_us_per_extra_chunk": modelled, "modelled_chunks": many_plan.num_chunks,
            "modelled_host_us_per_chunk": host_per_chunk, "modelled_gpu": tm.gpu, "source": r["source"]}
