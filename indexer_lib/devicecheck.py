"""The one-shot H200 measurement (``scripts/h200_check.sh``), and its CPU dry run.

Stages, each bounded in time and isolated (a stage that fails is recorded with
its error and the next one runs):

0. ``probe``: what DeepGEMM was found, and the padding it really allocates
   (row stride and rows of tiny calls, against ``indexer_lib.padding``); the
   first calls' time (JIT compilation) is recorded apart;
1. ``correctness``: deepgemm against reference on fresh random inputs for
   several shapes: relative difference of the logits inside each row's window,
   equality of the top-k sets, and the GPU top-k against the reference top-k on
   the same logits (that one must agree exactly);
2. ``memory``: representative steps x every strategy: measured peak
   (``max_memory_allocated`` after ``reset_peak_memory_stats``) next to the
   memory model's prediction;
3. ``timing``: per strategy and budget, CUDA events around the executor, median
   of repeats after warm-up; chunk count next to time (the per-chunk overhead);
4. ``frontier``: a small OOM frontier under emulated free memory (a ballast
   tensor leaves X GiB free; ``torch.OutOfMemoryError`` caught per point)
   next to the predicted one;
5. ``reserved``: ``memory_reserved`` and segment count across the steps of a
   long prompt prefilled in slices, for vllm, causal and fixed-shape, next to the
   caching-allocator model's prediction (``indexer_lib.reserved``).

Outputs under ``--out``: ``h200_check.json`` (provenance, stage status, the
summary) and one CSV per stage; a short table is printed last.  ``--dry-run``:
reference backend on the CPU, tiny shapes, the same stages and files (CUDA-only
readings are empty and say why), so CI runs it.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .memory import memory_report
from .plan import make_plan
from .prefill import execute
from .results import git_state
from .shapes import GIB, MIB
from .workload import StepBatch

STAGES = ("probe", "correctness", "memory", "timing", "frontier", "reserved")
STRATEGIES = ("n-only", "vllm", "per-request", "causal")
TOPK = 2048


# ------------------------------------------------------------------------------- configuration

@dataclass(frozen=True)
class Step:
    name: str
    model: str
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]

    @property
    def batch(self) -> StepBatch:
        return StepBatch.from_lengths(list(self.query_lens), list(self.seq_lens))


def _packed(name, model, n, ctx, q):
    return Step(name, model, (q,) * n, (ctx + q,) * n)


@dataclass(frozen=True)
class Config:
    dry_run: bool
    device: str
    correctness: tuple[Step, ...]
    memory_steps: tuple[Step, ...]
    memory_budget_mib: float
    timing_steps: tuple[Step, ...]
    timing_budgets_mib: tuple[float, ...]
    warmup: int
    repeats: int
    frontier_free_gib: tuple[float, ...]
    frontier_steps: tuple[Step, ...]
    frontier_budget_mib: float
    reserved_prompt: int
    reserved_slice: int
    reserved_budget_mib: float
    stage_seconds: dict = field(default_factory=dict)
    total_seconds: float = 390  # all stages together; each also has its own limit


def h200_config() -> Config:
    """Sizes that fill the chip but end well inside the 8-minute call."""
    ds, glm = "deepseek-v3.2", "glm-5"
    return Config(
        dry_run=False,
        device="cuda",
        correctness=(
            Step("one-prompt-4k", ds, (4096,), (4096,)),
            Step("chunked-prompt-2k-of-8k", ds, (2048,), (8192,)),
            Step("packed-3", ds, (200, 300, 100), (1200, 300, 2100)),
            Step("glm-one-prompt-4k", glm, (4096,), (4096,)),
            Step("glm-packed-partials", glm, (256,) * 8, (2560,) * 8),
        ),
        memory_steps=(
            Step("one-prompt-16k", ds, (16384,), (16384,)),
            _packed("partials-32x(2304+256)", ds, 32, 2304, 256),
            _packed("shared-prefix-8x(16k+512)", glm, 8, 16384, 512),
        ),
        memory_budget_mib=512,
        timing_steps=(
            Step("one-prompt-16k", ds, (16384,), (16384,)),
            _packed("partials-32x(2304+256)", ds, 32, 2304, 256),
        ),
        timing_budgets_mib=(128, 256, 512, 1024, 2048),
        warmup=1,
        repeats=5,
        # around the model's transitions: vllm/causal near 0.5, n-only of c32-isl4k and the
        # 32K prompt at 4.14 and 4.16 GiB transient (so 4.25 tests the last tenth of a GiB)
        frontier_free_gib=(0.5, 2.0, 4.25),
        frontier_steps=(
            _packed("c8-isl4k", ds, 8, 3840, 256),
            _packed("c32-isl4k", ds, 32, 3840, 256),
            _packed("c32-isl10k", ds, 32, 9984, 256),
            Step("one-prompt-32k", ds, (32768,), (32768,)),
        ),
        frontier_budget_mib=512,
        reserved_prompt=65536,
        reserved_slice=8192,
        reserved_budget_mib=512,
        stage_seconds={"probe": 120, "correctness": 70, "memory": 60, "timing": 60,
                       "frontier": 45, "reserved": 50},
        total_seconds=390,
    )


def dry_run_config() -> Config:
    """Tiny shapes for the reference backend on the CPU (seconds, not minutes)."""
    ds, glm = "deepseek-v3.2", "glm-5"
    return Config(
        dry_run=True,
        device="cpu",
        correctness=(
            Step("one-prompt-64", ds, (64,), (64,)),
            Step("packed-3", glm, (8, 16, 4), (40, 16, 20)),
        ),
        memory_steps=(Step("one-prompt-96", ds, (96,), (96,)), _packed("partials-4x(24+8)", glm, 4, 24, 8)),
        memory_budget_mib=0.01,
        timing_steps=(Step("one-prompt-96", ds, (96,), (96,)),),
        timing_budgets_mib=(0.01, 0.05),
        warmup=1,
        repeats=2,
        frontier_free_gib=(0.0001,),
        frontier_steps=(_packed("c2-isl32", ds, 2, 24, 8),),
        frontier_budget_mib=0.01,
        reserved_prompt=128,
        reserved_slice=32,
        reserved_budget_mib=0.01,
        stage_seconds={s: 60 for s in STAGES},
        total_seconds=300,
    )


# ------------------------------------------------------------------------------- provenance

def _run(cmd: list[str], timeout: float = 10) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(backend, args_command: str) -> dict:
    sha, dirty = git_state()
    sha = os.environ.get("INDEXER_LAB_GIT_SHA") or sha
    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": os.environ.get("H200_CHECK_COMMAND") or args_command,
        "git_sha": sha or "unknown",
        "git_dirty": dirty,
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "backend": backend.name,
        "deepgemm_rules": backend.deepgemm_version,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update({
            "gpu": props.name,
            "gpu_capability": f"{props.major}.{props.minor}",
            "gpu_total_bytes": props.total_memory,
            "gpu_multiprocessors": props.multi_processor_count,
            "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        })
    else:
        info.update({"gpu": None, "driver": None})
    dg_info = getattr(backend, "info", None)
    if dg_info is not None:
        info["deepgemm"] = dg_info.to_json()
        info["deepgemm"]["source"] = os.environ.get("DEEPGEMM_SOURCE", "installed")
    return info


# ------------------------------------------------------------------------------- helpers

class StageTimeout(Exception):
    pass


class Clock:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def check(self) -> None:
        if self.left() <= 0:
            raise StageTimeout("stage time limit reached")


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def plan_for(step: Step, strategy: str, budget_mib: float | None, backend):
    budget = None if strategy == "n-only" else max(1, int(budget_mib * MIB))
    return make_plan(step.batch, strategy, budget, model=step.model, **backend.plan_options(strategy))


def predicted(plan, backend) -> dict:
    """The memory model's bytes for a plan, with this backend's temporaries."""
    report = memory_report(plan, backend=backend, topk=TOPK)
    return {"predicted_peak": report.peak, "predicted_transient": report.peak_transient,
            "predicted_persistent": report.persistent}


def is_oom(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or an allocation failure that crossed another binding
    (DeepGEMM allocates its logits in C++: through tvm-ffi the error may arrive as
    a plain RuntimeError whose text says so)."""
    if isinstance(e, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(e).lower()
    return "out of memory" in text or "cudaerrormemoryallocation" in text


def _status_of(e: BaseException) -> str:
    first = str(e).splitlines()[0][:160] if str(e) else ""
    return f"OOM: {first}" if is_oom(e) else f"error: {type(e).__name__}: {first}"


# ------------------------------------------------------------------------------- stages

def stage_probe(ctx) -> list[dict]:
    from .kernels.deepgemm import DeepGemmBackend, probe_padding

    rows = []
    be = ctx.backend
    if not isinstance(be, DeepGemmBackend):
        return [{"layout": "-", "heads": h, "status": "skipped: reference backend (dry run)"} for h in (64, 32)]
    for heads in (64, 32):
        ctx.clock.check()
        t0 = time.perf_counter()
        res = probe_padding(be, heads, ctx.device)
        _sync(ctx.device)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        probe_padding(be, heads, ctx.device)
        _sync(ctx.device)
        again_s = time.perf_counter() - t0
        for layout, r in res["layouts"].items():
            rows.append({"layout": layout, "heads": heads, "status": "ok" if r["agrees"] else "MISMATCH",
                         "row_stride": r["row_stride"], "rows_allocated": r["rows_allocated"],
                         "rules_claimed": res["expected"], "rules_matching": " ".join(r["rules_matching"]),
                         "first_calls_s": round(first_s, 3), "warm_calls_s": round(again_s, 4)})
    return rows


def _windows(plan_chunk_batch, chunk, device):
    from .metadata import chunk_windows

    hks, hke = chunk_windows(plan_chunk_batch, chunk)
    return (torch.from_numpy(hks).to(device), torch.from_numpy(hke).to(device)), (hks, hke)


def stage_correctness(ctx) -> list[dict]:
    """One chunk per shape (all rows, full layout): deepgemm vs reference."""
    from .inputs import make_inputs
    from .kernels.reference import ReferenceBackend
    from .metadata import kv_slots

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
        plan = make_plan(batch, "n-only", None, model=step.model, deepgemm_version=ref.deepgemm_version)
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


def _measure(ctx, plan, inputs):
    """(peak bytes above the baseline, result) of one executor run."""
    if not _cuda(ctx.device):
        return None, execute(plan, inputs, ctx.backend, ctx.device)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = execute(plan, inputs, ctx.backend, ctx.device)
    torch.cuda.synchronize()
    # the executor resets the peak per chunk and records each chunk's max_memory_allocated
    # (its persistent workspace and top-k buffer included); the last reset covers the end
    peaks = [c.cuda_max_allocated for c in result.chunks if c.cuda_max_allocated is not None]
    peaks.append(torch.cuda.max_memory_allocated())
    return max(peaks) - base, result


def stage_memory(ctx) -> list[dict]:
    from .inputs import make_inputs

    rows = []
    for step in ctx.cfg.memory_steps:
        ctx.clock.check()
        inputs = make_inputs(step.batch, step.model, seed=ctx.seed, device=ctx.device)
        for strategy in STRATEGIES:
            ctx.clock.check()
            row = {"step": step.name, "model": step.model, "strategy": strategy,
                   "budget_mib": None if strategy == "n-only" else ctx.cfg.memory_budget_mib}

            def measure(row):
                plan = plan_for(step, strategy, ctx.cfg.memory_budget_mib, ctx.backend)
                row.update({"chunks": plan.num_chunks, **predicted(plan, ctx.backend)})
                execute(plan, inputs, ctx.backend, ctx.device)  # warm-up: JIT and first-use buffers
                peak, _ = _measure(ctx, plan, inputs)
                row["measured_peak"] = peak
                if peak is not None:
                    row["measured_over_predicted"] = round(peak / row["predicted_peak"], 4)
                row["status"] = "ok" if peak is not None else "ok (no CUDA: predicted only)"

            _run_point(ctx, rows, row, measure)
        del inputs
        _free(ctx.device)
    return rows


def _run_point(ctx, rows: list, row: dict, measure) -> None:
    """Fill ``row`` with ``measure(row)`` and keep it; a failing point is recorded in its
    status and the stage goes on (only the stage's time limit stops it)."""
    try:
        measure(row)
    except StageTimeout:
        raise
    except Exception as e:
        row["status"] = _status_of(e)
    rows.append(row)
    _free(ctx.device)


def _free(device) -> None:
    if _cuda(device):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _time_once(ctx, plan, inputs) -> float:
    if _cuda(ctx.device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        execute(plan, inputs, ctx.backend, ctx.device)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    execute(plan, inputs, ctx.backend, ctx.device)
    return (time.perf_counter() - t0) * 1e3


def stage_timing(ctx) -> list[dict]:
    from .inputs import make_inputs

    rows = []
    for step in ctx.cfg.timing_steps:
        ctx.clock.check()
        inputs = make_inputs(step.batch, step.model, seed=ctx.seed, device=ctx.device)
        points = [("n-only", None)] + [(s, b) for b in ctx.cfg.timing_budgets_mib for s in STRATEGIES[1:]]
        for strategy, budget in points:
            ctx.clock.check()
            row = {"step": step.name, "model": step.model, "strategy": strategy, "budget_mib": budget,
                   "timer": "cuda events" if _cuda(ctx.device) else "perf_counter"}

            def measure(row):
                plan = plan_for(step, strategy, budget, ctx.backend)
                row["chunks"] = plan.num_chunks
                for _ in range(ctx.cfg.warmup):
                    execute(plan, inputs, ctx.backend, ctx.device)
                times = [_time_once(ctx, plan, inputs) for _ in range(ctx.cfg.repeats)]
                row.update({"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
                            "max_ms": round(max(times), 4), "repeats": len(times), "status": "ok"})

            _run_point(ctx, rows, row, measure)
        del inputs
        _free(ctx.device)
    return rows


def stage_frontier(ctx) -> list[dict]:
    from .inputs import make_inputs

    rows = []
    warmed = set()
    for step in ctx.cfg.frontier_steps:
        ctx.clock.check()
        inputs = make_inputs(step.batch, step.model, seed=ctx.seed, device=ctx.device)
        for free_gib in ctx.cfg.frontier_free_gib:
            for strategy in ("n-only", "vllm", "causal"):
                ctx.clock.check()
                row = {"step": step.name, "model": step.model, "strategy": strategy, "free_gib": free_gib,
                       "budget_mib": None if strategy == "n-only" else ctx.cfg.frontier_budget_mib}
                ballast = None
                try:
                    plan = plan_for(step, strategy, ctx.cfg.frontier_budget_mib, ctx.backend)
                    pred = predicted(plan, ctx.backend)
                    transient = pred["predicted_transient"]
                    row["predicted_fits"] = transient <= free_gib * GIB
                    row["predicted_transient"] = transient
                    row["chunks"] = plan.num_chunks
                    if not _cuda(ctx.device):
                        row["measured"] = None
                        row["status"] = "ok (no CUDA: predicted only)"
                        rows.append(row)
                        continue
                    if (step.name, strategy) not in warmed:  # JIT and first use, outside the ballast
                        execute(plan, inputs, ctx.backend, ctx.device)
                        warmed.add((step.name, strategy))
                    _free(ctx.device)
                    free_now, _ = torch.cuda.mem_get_info()
                    # the engine reserved its persistent buffers before "free" was read: the
                    # executor allocates them inside the call, so they are left free on top
                    persistent = pred["predicted_persistent"]
                    leave = int(free_gib * GIB) + persistent
                    row["left_free"] = leave
                    if free_now > leave:
                        ballast = torch.empty(free_now - leave, dtype=torch.uint8, device=ctx.device)
                    row["free_after_ballast"] = torch.cuda.mem_get_info()[0]
                    try:
                        execute(plan, inputs, ctx.backend, ctx.device)
                        torch.cuda.synchronize()
                        row["measured"] = "fits"
                    except Exception as e:
                        if not is_oom(e):
                            raise
                        row["measured"] = "OOM"
                        row["oom_type"] = type(e).__name__
                    row["status"] = "ok"
                    row["agrees"] = (row["measured"] == "fits") == row["predicted_fits"]
                except StageTimeout:
                    raise
                except Exception as e:
                    row["status"] = _status_of(e)
                finally:
                    del ballast
                    _free(ctx.device)
                rows.append(row)
        del inputs
        _free(ctx.device)
    return rows


RESERVED_STRATEGIES = ("vllm", "causal", "fixed-shape")


def stage_reserved(ctx) -> list[dict]:
    """A long prompt prefilled slice by slice (one engine step per slice), once per
    strategy (vllm, causal, fixed-shape at one width for the whole prompt): after each
    slice the measured ``memory_reserved`` (minus the reading before the strategy's
    first slice) next to the caching-allocator model's prediction for the same
    allocations (``reserved.reserved_curve``, inputs included).  One row per slice,
    columns per strategy; the vllm readings also under the original names."""
    from .inputs import make_inputs
    from .reserved import long_prompt_steps, reserved_curve

    total, piece = ctx.cfg.reserved_prompt, ctx.cfg.reserved_slice
    model = "deepseek-v3.2"
    budget = max(1, int(ctx.cfg.reserved_budget_mib * MIB))
    steps = long_prompt_steps(total, piece)
    cuda = _cuda(ctx.device)

    def plan_of(batch, strategy):
        opts = ctx.backend.plan_options(strategy)
        if strategy == "fixed-shape":
            opts["fixed_width"] = total  # one logits shape over the whole prompt
        return make_plan(batch, strategy, budget, model=model, **opts)

    def report_of(plan):
        return memory_report(plan, backend=ctx.backend, topk=TOPK)

    rows = [{"slice": i, "context_len": b.requests[0].context_len, "query_len": b.num_rows}
            for i, b in enumerate(steps)]
    for strategy in RESERVED_STRATEGIES:
        col = strategy.replace("-", "_")
        predicted = reserved_curve(strategy, steps, plan_fn=plan_of, report_fn=report_of,
                                   include_inputs=True)
        _free(ctx.device)
        base = torch.cuda.memory_reserved() if cuda else None
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for i, (batch, pred) in enumerate(zip(steps, predicted)):
            ctx.clock.check()
            row = rows[i]
            inputs = make_inputs(batch, model, seed=ctx.seed + i, device=ctx.device)
            plan = plan_of(batch, strategy)
            execute(plan, inputs, ctx.backend, ctx.device)
            row.update({f"chunks_{col}": plan.num_chunks,
                        f"logits_bytes_max_{col}": max(c.logits_bytes for c in plan.chunks),
                        f"predicted_reserved_{col}": pred.reserved,
                        f"predicted_peak_allocated_{col}": pred.peak_allocated,
                        f"predicted_segments_{col}": pred.segments})
            if cuda:
                torch.cuda.synchronize()
                st = torch.cuda.memory_stats()
                reserved = torch.cuda.memory_reserved()
                row.update({f"measured_reserved_{col}": reserved - base,
                            f"measured_max_allocated_{col}": torch.cuda.max_memory_allocated(),
                            f"measured_segments_{col}": st.get("segment.all.current"),
                            f"measured_over_predicted_{col}": round((reserved - base) / pred.reserved, 4)})
                if strategy == "vllm":  # the original columns
                    row.update({"chunks": plan.num_chunks, "reserved": reserved,
                                "max_reserved": torch.cuda.max_memory_reserved(),
                                "allocated": torch.cuda.memory_allocated(),
                                "max_allocated": torch.cuda.max_memory_allocated(),
                                "segments": st.get("segment.all.current")})
                row["status"] = "ok"
            else:
                row["status"] = "ok (no CUDA: measured readings need a GPU; predicted only)"
            del inputs
        _free(ctx.device)
    return rows


STAGE_FUNCS = {"probe": stage_probe, "correctness": stage_correctness, "memory": stage_memory,
               "timing": stage_timing, "frontier": stage_frontier, "reserved": stage_reserved}


# ------------------------------------------------------------------------------- driver

@dataclass
class Context:
    cfg: Config
    backend: object
    device: str
    seed: int
    clock: Clock = None


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys or ["status"])
        writer.writeheader()
        for r in rows:
            writer.writerow(r)


def make_backend(cfg: Config, name: str | None):
    from .kernels import get_backend

    name = name or ("reference" if cfg.dry_run else "deepgemm")
    return get_backend(name)


def run(cfg: Config, out: Path, backend_name: str | None = None, stages=STAGES,
        seed: int | None = None, command: str = "", total_seconds: float | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 2**31)
    summary = {"mode": "dry-run" if cfg.dry_run else "measure", "seed": seed, "stages": {}}
    try:
        backend = make_backend(cfg, backend_name)
    except Exception as e:  # nothing can run without a backend: say why and stop
        summary["provenance"] = {"command": command, "error": f"{type(e).__name__}: {e}"}
        summary["stages"] = {s: {"status": "not run: no backend"} for s in stages}
        (out / "h200_check.json").write_text(json.dumps(summary, indent=2, default=str))
        print(f"h200_check: no backend: {e}", file=sys.stderr)
        return summary
    summary["provenance"] = provenance(backend, command)
    ctx = Context(cfg, backend, cfg.device, seed)
    end = time.monotonic() + (cfg.total_seconds if total_seconds is None else total_seconds)
    for stage in stages:
        # a stage gets its own limit, but never time that the run as a whole does not have
        ctx.clock = Clock(min(cfg.stage_seconds.get(stage, 60), end - time.monotonic()))
        t0 = time.monotonic()
        status, rows, error, stop = "ok", [], None, False
        print(f"[h200_check] stage {stage} ...", flush=True)
        try:
            rows = STAGE_FUNCS[stage](ctx)
        except StageTimeout:
            status = "partial: stage time limit reached"
        except KeyboardInterrupt:  # the shell script's hard timeout: keep what was measured
            status = "interrupted: run time limit reached"
            stop = True
        except Exception as e:
            status = f"failed: {type(e).__name__}: {e}"
            error = traceback.format_exc(limit=6)
        finally:
            _free(cfg.device)
        bad = [r for r in rows if not str(r.get("status", "ok")).startswith(("ok", "skipped"))]
        if status == "ok" and bad:
            status = f"ok with {len(bad)} flagged rows"
        info = {"status": status, "seconds": round(time.monotonic() - t0, 2), "rows": len(rows)}
        if error:
            info["traceback"] = error
        summary["stages"][stage] = info
        _write_csv(out / f"{stage}.csv", rows)
        summary.setdefault("results", {})[stage] = rows
        print(f"[h200_check] stage {stage}: {status} ({info['seconds']} s)", flush=True)
        # written after every stage: a run cut short still leaves what it measured
        (out / "h200_check.json").write_text(json.dumps(summary, indent=2, default=str))
        if stop:
            break
    print(table(summary))
    return summary


def _fmt_bytes(b) -> str:
    return "-" if b is None or b == "" else f"{int(b) / GIB:.3f}"


def table(summary: dict) -> str:
    """The short table printed last (the reply carries the end of the output)."""
    lines = [f"h200_check {summary['mode']}  seed {summary['seed']}  "
             f"gpu {summary['provenance'].get('gpu')}  torch {summary['provenance'].get('torch')}  "
             f"rules {summary['provenance'].get('deepgemm_rules')}"]
    for stage, info in summary["stages"].items():
        lines.append(f"  {stage:<12} {info['status']} ({info.get('seconds', '-')} s, {info.get('rows', 0)} rows)")
    res = summary.get("results", {})
    for r in res.get("correctness", []):
        lines.append(f"  correct {r['shape']:<26} {r['layout']:<10} rel {r['rel_diff']:.2e} "
                     f"sets {r['topk_rows_equal_sets']}/{r['topk_rows']} same-logits-topk "
                     f"{r['gpu_topk_equals_reference_topk']}")
    for r in res.get("memory", []):
        lines.append(f"  memory  {r['step']:<26} {r['strategy']:<11} chunks {r.get('chunks', '-')!s:>4} "
                     f"pred {_fmt_bytes(r.get('predicted_peak'))} GiB meas {_fmt_bytes(r.get('measured_peak'))} GiB"
                     f"  {r['status'][:40]}")
    for r in res.get("timing", []):
        lines.append(f"  time    {r['step']:<26} {r['strategy']:<11} {r['budget_mib']!s:>6} MiB "
                     f"chunks {r.get('chunks', '-')!s:>4} median {r.get('median_ms', '-')} ms")
    for r in res.get("frontier", []):
        lines.append(f"  oom     {r['step']:<26} {r['strategy']:<11} free {r['free_gib']} GiB "
                     f"pred {'fits' if r.get('predicted_fits') else 'OOM'} meas {r.get('measured')}")
    rs = res.get("reserved", [])
    if rs and rs[-1].get("reserved") is not None:
        lines.append(f"  reserved after {len(rs)} slices: {_fmt_bytes(rs[-1]['reserved'])} GiB, "
                     f"segments {rs[-1]['segments']}")
    if rs:
        for strategy in RESERVED_STRATEGIES:
            col = strategy.replace("-", "_")
            last = rs[-1]
            if last.get(f"measured_reserved_{col}") is not None:  # the dry run predicts only
                lines.append(f"  reserved {strategy:<11} after {len(rs)} slices: predicted "
                             f"{_fmt_bytes(last[f'predicted_reserved_{col}'])} GiB, measured "
                             f"{_fmt_bytes(last.get(f'measured_reserved_{col}'))} GiB (above baseline)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m indexer_lib.devicecheck", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "results/h200_check",
                   help="folder for h200_check.json and the stage CSVs (default: $OUT)")
    p.add_argument("--dry-run", action="store_true", help="reference backend on the CPU, tiny shapes")
    p.add_argument("--backend", default=None, help="backend name (default: deepgemm; reference with --dry-run)")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    p.add_argument("--seed", type=int, default=None, help="input seed (default: fresh)")
    p.add_argument("--total-seconds", type=float, default=None,
                   help="time for all stages together (default: 390 on the GPU, 300 for --dry-run)")
    args = p.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        p.error(f"unknown stage(s) {unknown}: choose from {', '.join(STAGES)}")
    cfg = dry_run_config() if args.dry_run else h200_config()
    if not cfg.dry_run and not torch.cuda.is_available():
        p.error("no CUDA device: run on the H200, or pass --dry-run")
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "indexer_lib.devicecheck",
                                               *(argv if argv is not None else sys.argv[1:])])
    summary = run(cfg, Path(args.out), args.backend, stages, args.seed, command, args.total_seconds)
    failed = [s for s, i in summary["stages"].items() if not i["status"].startswith(("ok", "partial"))]
    return 1 if failed or "error" in summary["provenance"] else 0


if __name__ == "__main__":
    sys.exit(main())
