"""Sweeps: a grid of workloads x strategies x budgets, run in one of three modes.

- ``model``: scheduler simulator + planners + memory model (CPU, fast);
- ``trace``: the tracer's peak bytes of each worst step (the executor's real
  allocations, replayed without a GPU);
- ``measure``: the worst step executed on a CUDA GPU: OOM caught, time measured.

Results are one tidy table (one row per point x strategy) in a resumable store
(``indexer_lib.sweep.store``): a task is durable before the next starts, a restart
with the same arguments skips what is done.  Every row carries its ``mode`` and
its provenance, so a modelled number is never mistaken for a measured one.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import search
from ..memory import NO_LINE, decode_step_bytes, first_past_free, make_plan, topk_buffer_bytes, workspace_bytes
from ..runmode import headless
from ..engines import decode_graph_max_bs, get_engine, not_default_text
from ..fast import step_features, step_time_ms, young_only
from ..plan import MEASURED_BUDGET, get_strategy
from ..presets import GIB, free_bytes_from_gib
from .executors import Local, Ray
from .grid import MODES, Grid, Task
from .results import check_table_path, git_state
from .store import ResultStore
from ..timemodel.model import TimeModel
from ..workload import check_int
from ..workload.lengths import mix_text
from ..workload.ranks import rank_clients


@dataclass(frozen=True)
class RunSettings:
    """How a sweep runs; part of what identifies its result file."""

    mode: str = "model"
    # trace / measure: the kernels backend; trace with "replay": the `engine` strategy's worst
    # steps replayed through the release's own code (``run.replay``) instead of our executor
    backend: str = "reference"
    seed: int = 0  # measure: inputs
    repeats: int = 3  # measure: timed runs per point (after one warm-up)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}: must be one of {', '.join(MODES)}")
        if self.backend == "engine":  # the old spelling
            raise ValueError("backend 'engine' is now spelled 'replay'")
        if self.backend == "replay" and self.mode != "trace":
            raise ValueError(f"backend 'replay' replays the engine's own code on the meta device: "
                             f"mode must be 'trace', not {self.mode!r}")
        check_int("repeats", self.repeats, 1)


def spec_of(grid: Grid, settings: RunSettings) -> dict:
    spec = {k: list(v) if isinstance(v, tuple) else v for k, v in grid.flat().items()}
    spec.update(asdict(settings))
    if spec.get("gpu") == "h200":  # the default GPU: a store journalled before GPUs were data resumes
        spec.pop("gpu")
    if settings.mode == "model":  # backend, seed and repeats do not change modelled rows
        for k in ("backend", "seed", "repeats"):
            spec.pop(k)
    return spec


def spec_defaults() -> dict:
    """Each grid and run setting's default, spelled as a spec spells it: a store journalled before
    a setting existed holds the same sweep as one where it is at its default (the store compares
    them so)."""
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in Grid.defaults().items()}
    out.update(asdict(RunSettings()))
    return out


def spec_hash(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


# -- provenance ------------------------------------------------------------------

def git_sha() -> str:
    sha, dirty = git_state()
    return sha + ("-dirty" if dirty else "") if sha else "unknown"


def package_versions() -> dict:
    from importlib import metadata

    versions = {}
    for name in ("indexer-lab", "torch", "numpy", "pandas", "pyarrow", "deep-gemm",
                 "sgl-deep-gemm"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def provenance(device: str) -> dict:
    return {"git_sha": git_sha(), "versions": json.dumps(package_versions(), sort_keys=True),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device}


# -- the grid's tasks ---------------------------------------------------------------

@functools.lru_cache(maxsize=256)  # dashboards replan the same schedules; bounded memory
def schedule_of(workload, config, source: str) -> search.Schedule:
    """The prefill step batches of a workload, from the simulator or vLLM, grouped, with the most
    requests a step decodes."""
    return search.Schedule.of(workload, config, source)


def base_row(grid: Grid, task: Task, budget_mb: float | None, free_gib: float, mode: str) -> dict:
    """What a row says of its point: the grid's settings, the workload, the scheduler, the engine,
    the strategy, its budget and the free memory."""
    workload, config = task.workload, task.scheduler
    settings = grid.runs_under(task.engine, task.strategy)
    return {
        "mode": mode, "model": grid.model, "engine": task.engine, "concurrency": workload.concurrency,
        "isl": workload.isl, "osl": workload.osl, "shared_prefix": workload.shared_prefix,
        # mixed lengths: 0 and '' for the homogeneous workload (isl is then every prompt's length)
        "random_range_ratio": workload.random_range_ratio, "mix": mix_text(workload.mix), "length_seed": workload.seed,
        "warm_cache": workload.warm_cache,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "max_num_seqs": config.max_num_seqs,
        "long_prefill_token_threshold": config.long_prefill_token_threshold,
        "async_scheduling": config.async_scheduling,
        # the deployment: draft tokens per decode, and the KV cache in tokens (0: room for every request)
        "speculative_tokens": config.speculative_tokens,
        "kv_cache_tokens": config.num_kv_blocks * config.block_size, "tp": grid.tp,
        # SGLang's DP attention: the ranks, and the clients of the one planned (the busiest)
        "dp": config.dp, "rank_concurrency": rank_clients(workload.concurrency, config.dp),
        # the scheduler settings that differ from the release's defaults ('' where none does)
        "not_default": "; ".join([d for d in [not_default_text(task.engine, config)] if d]
                                 + grid.deployment_not_default(task.engine)),
        "workload_source": grid.workload_source,
        "deepgemm_version": settings.deepgemm, "padded_budget": settings.padded,
        "temporaries": settings.temporaries or "none", "strategy": task.strategy,
        "budget_mb": None if budget_mb is None else float(budget_mb),  # None: the strategy reads no budget
        "free_gib": float(free_gib),
    }


def worst_step_detail(schedule: search.Schedule, w: search.WorstStep, settings, time_model: TimeModel) -> dict:
    """What the tables report about a worst step (planned under ``settings``)."""
    batch = schedule.step(w.worst_step)
    strategy = get_strategy(w.strategy)
    f = step_features(batch, strategy, w.budget_bytes, settings, w.budget_stable)
    time_model = time_model.for_gpu(settings.gpu)  # another GPU's time stands in where its own is not modelled
    return {
        "budget_bytes": -1 if w.budget_bytes is None else w.budget_bytes,
        "worst_step": w.worst_step, "worst_rows": w.worst_rows,
        "worst_kv_tokens": w.worst_kv_tokens, "worst_requests": len(batch.requests),
        "worst_chunks": w.worst_chunks, "worst_gathers": f["gathers"],
        "worst_allocated_logits_bytes": f["allocated_logits_bytes"],
        # the worst step's largest single logits allocation: what a "Tried to allocate" names
        "largest_logits_bytes": f["largest_logits_bytes"],
        "worst_useful_elements": f["useful_elements"],
        "worst_gathered_kv_tokens": f["gathered_kv_tokens"],
        "max_chunks": w.max_chunks, "total_chunks": w.total_chunks, "over_budget": w.over_budget,
        "model_peak_bytes": w.peak_bytes, "model_peak_transient_bytes": w.peak_transient_bytes,
        "model_time_ms": step_time_ms(batch, strategy, w.budget_bytes, settings, w.budget_stable, time_model),
        "model_time_gpu": time_model.gpu,  # the GPU whose modelled time that is
        # a model whose kinds see a step differently (DeepSeek-V4.1): the kind that sets the peak
        **({"worst_layer_kind": w.layer_kind} if w.layer_kind is not None else {}),
    }


def budget_at(grid: Grid, task: Task, budget_mb: float | None, free_gib: float) -> int | None:
    """The logits budget a task's strategy plans with at one budget and free memory (None: it reads
    none at all)."""
    if budget_mb is None and not grid.measures_budget(task.engine, task.strategy):
        return None
    return get_strategy(task.strategy).budget_bytes(budget_mb, free_gib, grid.settings(task.engine),
                                                    grid.mem_fraction_static_on(task.engine))


def budget_groups(grid: Grid, task: Task) -> list[tuple[tuple[float, ...], list[int | None]]]:
    """(free GiBs, the budgets planned for them, one per budget MiB) of a task: the grid's budgets
    serve every free GiB, unless the engine measures its own from free memory."""
    measured = grid.measures_budget(task.engine, task.strategy)
    groups = [(f,) for f in task.frees_gib] if measured else [task.frees_gib]
    return [(group, [budget_at(grid, task, mb, group[0]) for mb in task.budgets_mb]) for group in groups]


def worst_decode(schedule: search.Schedule, settings, drafts: int) -> dict:
    """The schedule's worst decode step as a row reports it: its decode tokens (the most decoding
    requests, each with its drafts) and its paged logits at the model's max_model_len, the server's
    default (``memory.decode``; None where the release's decode path is not read; 0 where SGLang's
    decode CUDA graph at one GPU's default replays it)."""
    most = schedule.most_decoding or 0
    graph_bs = 0 if settings.profile is None else decode_graph_max_bs(settings.profile, settings.gpu_preset) or 0
    return {"worst_decode_tokens": most * (1 + drafts),
            "decode_bytes": decode_step_bytes(settings, most * (1 + drafts), settings.preset.max_model_len, drafts,
                                              graph_bs)}


# a row's step lines in the ledger's order; NO_LINE (-1) reads the last, '' (every line fits)
ROW_STEP_LINES = np.array(["prefill", "decode", ""])


def step_verdict(transient, decode, free_bytes):
    """(oom, oom_line) of rows by the ledger's rule (``memory.verdict``): the first of the prefill
    step's transient peak and the decode step's logits (``decode``: 0 where not read) past the
    memory free when a step runs; numbers or arrays alike."""
    first = first_past_free((transient, decode), free_bytes)
    return first != NO_LINE, ROW_STEP_LINES[first]


def model_task(grid: Grid, task: Task, time_model: TimeModel, prov: dict) -> list[dict]:
    """The modelled rows of a task: every budget and free memory of its workload and strategy."""
    schedule = schedule_of(task.workload, task.scheduler, grid.workload_source)
    settings = grid.settings(task.engine)
    rows = []
    base = base_row(grid, task, None, task.frees_gib[0], "model")  # what every row of the task says
    base.update(worst_decode(schedule, settings, task.scheduler.speculative_tokens))
    decode = base["decode_bytes"] or 0
    for group, budgets in budget_groups(grid, task):
        outcomes = search.worst_steps(schedule, task.strategy, budgets, settings,
                                        topk_rows=task.scheduler.max_num_batched_tokens)
        for mb, w in zip(task.budgets_mb, outcomes):
            detail = worst_step_detail(schedule, w, settings, time_model)
            for free in group:
                row = {**base, "budget_mb": None if mb is None else float(mb), "free_gib": float(free)}
                row.update(detail)
                oom, line = step_verdict(w.peak_transient_bytes, decode, free_bytes_from_gib(free))
                row.update(peak_bytes=w.peak_bytes, peak_transient_bytes=w.peak_transient_bytes,
                           needed_bytes=max(w.peak_transient_bytes, decode), oom=bool(oom), oom_line=str(line),
                           time_ms=None, error=None, **prov)
                rows.append(row)
    return rows


def _model_worst(grid: Grid, task: Task, budget_bytes: int | None, time_model: TimeModel, backend: str):
    """The modelled worst step, counting the temporaries of the backend that will run it: what
    the tables report about it, and its plan."""
    schedule = schedule_of(task.workload, task.scheduler, grid.workload_source)
    settings = grid.settings(task.engine).where(temporaries=backend)
    w = search.worst_step(schedule, task.strategy, budget_bytes, settings,
                            topk_rows=task.scheduler.max_num_batched_tokens)
    plan = make_plan(schedule.step(w.worst_step), task.strategy, budget_bytes, settings)
    return worst_step_detail(schedule, w, settings, time_model), plan


def check_replay(grid: Grid) -> None:
    """ValueError, before any work, for a grid the engine replay cannot run: only the ``engine``
    strategy, on releases whose path is replayed and installed here."""
    from ..run.replay import engine_python

    others = [s for s in grid.strategy if not get_strategy(s).own_build]
    if others:
        raise ValueError(f"backend 'replay' replays the engine's own chunker: strategy {others[0]!r} "
                         "is ours (trace it with backend 'reference' or 'deepgemm')")
    for engine in grid.engine:
        engine_python(engine)


def _replay_peaks(plan, config, process) -> tuple[int, int]:
    """(peak, peak minus the persistent buffers) of a worst step, replayed by the engine's code."""
    from ..run.replay import replay_steps

    budget = plan.budget_bytes
    if budget is not None and budget % (1 << 20):
        raise ValueError(f"budget {budget} bytes: the engine's budget is a whole number of MiB")
    (r,) = replay_steps(process.profile, plan.model, [(plan.batch.query_lens, plan.batch.seq_lens,
                                                      None if budget is None else budget >> 20)],
                        max_num_batched_tokens=config.max_num_batched_tokens, process=process)
    return r.peak_bytes, r.peak_bytes - r.persistent_bytes


def trace_task(grid: Grid, settings: RunSettings, task: Task, time_model: TimeModel, prov: dict,
               replayers=None) -> list[dict]:
    """``replayers``: engine -> ``run.replay.ReplayProcess`` (backend 'replay')."""
    from ..run.tracer import trace  # torch: only trace mode needs it

    (mb,) = task.budgets_mb
    traced_by_budget = {}  # one trace per distinct budget (SGLang's depends on free memory)
    rows = []
    for free in task.frees_gib:
        budget = budget_at(grid, task, mb, free)
        if budget not in traced_by_budget:
            detail, plan = _model_worst(grid, task, budget, time_model, settings.backend)
            if settings.backend == "replay":
                peaks = _replay_peaks(plan, task.scheduler, replayers[task.engine])
            else:
                result = trace(plan, topk_rows=task.scheduler.max_num_batched_tokens, backend=settings.backend)
                peaks = int(result.peak_bytes), int(result.peak_transient)
            traced_by_budget[budget] = (detail, *peaks)
        detail, traced, transient = traced_by_budget[budget]
        row = base_row(grid, task, mb, free, "trace")
        row.update(detail)
        row.update(peak_bytes=traced, peak_transient_bytes=transient,
                   oom=transient > free_bytes_from_gib(free), time_ms=None, error=None, **prov)
        rows.append(row)
    return rows


class Measurer:
    """Runs one plan's worst step on a GPU: OOM caught, memory freed, time measured.

    ``free_gib`` is enforced with a ballast allocation, so that the executor sees
    ``free_gib`` plus the persistent buffers it allocates itself.  Every point
    ends with its tensors dropped and the allocator's cache emptied; the row
    records the reserved bytes after that next to the baseline (reserved when
    the measurer started), so a leak between points shows.  ``device``: the
    device layer (``run.device.CudaDevice`` by default).
    """

    def __init__(self, settings: RunSettings, device=None):
        if device is None:
            from ..run.device import CudaDevice

            device = CudaDevice()
        self.dev = device
        self.settings = settings
        self.device = device.name
        self._free()
        self.baseline_reserved = device.memory_reserved()

    def _free(self) -> None:
        import gc

        gc.collect()
        self.dev.synchronize()
        self.dev.empty_cache()

    def run(self, plan, free_gib: float, topk_rows: int) -> dict:
        result = self._run(plan, free_gib, topk_rows)  # its tensors are gone when it returns
        self._free()
        result.update(reserved_after_bytes=self.dev.memory_reserved(),
                      reserved_baseline_bytes=self.baseline_reserved)
        return result

    def _run(self, plan, free_gib: float, topk_rows: int) -> dict:
        import torch

        dev = self.dev
        persistent = workspace_bytes(plan.settings, plan.workspace_tokens) + topk_buffer_bytes(topk_rows, plan.settings.preset.topk)
        free_now, _ = dev.mem_get_info()
        ballast_bytes = free_now - free_bytes_from_gib(free_gib) - persistent
        if ballast_bytes < 0:
            return {"oom": None, "error": f"only {free_now / GIB:.2f} GiB free on the GPU, "
                    f"{free_gib} GiB + persistent buffers requested"}
        ballast = inputs = run = None
        try:
            ballast = dev.allocate(ballast_bytes)
            inputs = dev.make_inputs(plan.batch, plan.model, self.settings.seed)
            base = dev.memory_allocated()
            run = functools.partial(dev.execute, plan, inputs, self.settings.backend, topk_rows)
            run()  # warm-up: kernels compiled, allocator primed
            dev.synchronize()
            dev.reset_peak_memory_stats()
            times = sorted(dev.elapsed_ms(run) for _ in range(self.settings.repeats))
            peak = dev.max_memory_allocated() - base
            return {"oom": False, "error": None, "time_ms": times[len(times) // 2],
                    "measured_peak_bytes": peak}
        except torch.OutOfMemoryError as e:
            # the message only: the traceback would keep the failed step's tensors alive
            return {"oom": True, "error": f"OutOfMemoryError: {str(e).splitlines()[0]}"}
        finally:
            del ballast, inputs, run


def measure_task(grid: Grid, settings: RunSettings, measurer: Measurer, task: Task, time_model: TimeModel,
                 prov: dict) -> list[dict]:
    (mb,), (free,) = task.budgets_mb, task.frees_gib
    detail, plan = _model_worst(grid, task, budget_at(grid, task, mb, free), time_model, settings.backend)
    result = measurer.run(plan, free, task.scheduler.max_num_batched_tokens)
    row = base_row(grid, task, mb, free, "measure")
    row.update(detail)
    peak = result.get("measured_peak_bytes")
    row.update(peak_bytes=peak, peak_transient_bytes=peak, oom=result["oom"],
               time_ms=result.get("time_ms"), error=result["error"],
               reserved_after_bytes=result.get("reserved_after_bytes"),
               reserved_baseline_bytes=result.get("reserved_baseline_bytes"), **prov)
    return [row]


def tagged(tid: str, rows: list[dict]) -> list[dict]:
    """A task's rows, each carrying its task id (the table's ``task`` column), as they come back."""
    for row in rows:
        row["task"] = tid
    return rows


def _model_task_rows(grid: Grid, task: Task, time_model: TimeModel, prov: dict) -> tuple[str, list[dict]]:
    """One model task where it runs (here, a worker process or a Ray worker): its id and rows."""
    with young_only():  # the plans kept for the grid's other tasks are not walked again
        return task.id, model_task(grid, task, time_model, prov)


STEPS_BATCH = 128  # tasks whose schedules are held at once (``schedule_of`` keeps 256)


def with_steps_evaluated(grid: Grid, tasks):
    """The tasks, each batch of them yielded once its schedules' steps of one request and of two
    are evaluated together (``search.evaluate_steps_together``)."""
    tasks = iter(tasks)
    while batch := list(itertools.islice(tasks, STEPS_BATCH)):
        search.evaluate_steps_together(
            (schedule_of(task.workload, task.scheduler, grid.workload_source), task.strategy, budgets,
             grid.settings(task.engine), task.scheduler.max_num_batched_tokens)
            for task in batch for _, budgets in budget_groups(grid, task))
        yield from batch


def evaluate_steps(grid: Grid) -> None:
    """The steps of one request and of two of every task of the grid, at all its budgets,
    evaluated together and kept (``search.evaluate_steps_together``): a dashboard's budget axis in
    one pass, whose rows then look them up."""
    for _ in with_steps_evaluated(grid, grid.tasks("model")):
        pass


def model_rows(grid: Grid, executor: Local | Ray = Local(), progress=None):
    """The grid's modelled rows, computed in memory without a store (the notebooks' small grids,
    the dashboards), in grid order whatever computes them.
    ``progress``: called with 1 after each task."""
    time_model = TimeModel.published()
    tasks = grid.tasks("model")
    if executor == Local():  # in this process: the steps of one request or two evaluated together first
        tasks = with_steps_evaluated(grid, tasks)
    done = executor.map(_model_task_rows, ((grid, task, time_model, {}) for task in tasks))
    for tid, rows in done:
        yield from tagged(tid, rows)
        if progress:
            progress(1)


# -- running a sweep ---------------------------------------------------------------

COLUMN_TYPES = {"time_ms": "float64", "peak_bytes": "Int64", "peak_transient_bytes": "Int64",
                "decode_bytes": "Int64", "needed_bytes": "Int64", "oom_line": "string", "oom": "boolean",
                "error": "string", "reserved_after_bytes": "Int64", "reserved_baseline_bytes": "Int64"}
# fsync the journal after every measured point; cheap tasks share one fsync a second
SYNC_SECONDS = {"model": 1.0, "trace": 1.0, "measure": 0.0}


def to_frame(rows: list[dict]):
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column, dtype in COLUMN_TYPES.items():
        if column in frame.columns:
            frame[column] = frame[column].astype(dtype)
    if "peak_transient_bytes" in frame.columns:
        frame["peak_transient_gib"] = frame["peak_transient_bytes"].astype("float64") / GIB
    return frame


def run(grid: Grid, out: str | Path, settings: RunSettings = RunSettings(), executor: Local | Ray = Local(),
        progress: bool = True, after_task=None, device=None, as_frame: bool = True):
    """Run (or resume) a sweep into the Parquet table ``out``; return it as a DataFrame
    (``as_frame=False``: return the table's path, for grids too big to hold in memory).

    Memory does not grow with the grid: tasks are generated as they run, rows go
    to the journal and are streamed from it into the table.  ``after_task(task_id)``
    is called after each task is durable (tests use it); ``device``: measure
    mode's device layer (default: the CUDA GPU).  ``executor``: where the tasks are computed
    (``sweep.executors``): here (``Local()``), model tasks in worker processes
    (``Local(workers)``), or on a Ray cluster (``Ray(address)``): model tasks in batches, each
    measured point a Ray task on one GPU (``device``: then a callable making the device layer in
    the worker; rows name the node and GPU).  This process stays the only writer and writes in
    grid order, so the journal and the table are the local run's.
    """
    from tqdm.auto import tqdm

    check_table_path(out, (".parquet",))  # before the work, so a bad path loses nothing
    on_ray = isinstance(executor, Ray)
    if on_ray and settings.mode == "trace":
        raise ValueError("executor 'ray' runs model and measure sweeps; mode 'trace' runs locally")
    if isinstance(executor, Local) and executor.workers != 1 and settings.mode != "model":
        raise ValueError(f"workers {executor.workers}: worker processes compute model sweeps; "
                         f"mode {settings.mode!r} runs here")
    spec = spec_of(grid, settings)
    header = {"grid_hash": spec_hash(spec), "spec": spec, "defaults": spec_defaults()}
    time_model = TimeModel.published()
    total = sum(1 for _ in grid.tasks(settings.mode))
    on_ray_gpus = on_ray and settings.mode == "measure"
    measurer = Measurer(settings, device) if settings.mode == "measure" and not on_ray_gpus else None
    device_name = measurer.device if measurer else "cpu"
    if settings.backend == "replay":
        check_replay(grid)
        device_name = "meta (the engine's own code, replayed)"
    if on_ray:
        from . import cluster
        executor.connect()  # an unreachable cluster says so before the store is touched
        if on_ray_gpus and cluster.gpu_count(executor.address) < 1:
            raise ValueError(f"the Ray cluster at {executor.address or 'a new local instance'!r} has no GPU: "
                             "a measure sweep runs each point on one GPU")
        if on_ray_gpus:
            device_name = "the Ray worker's GPU"
    with ResultStore(out, header, sync_seconds=SYNC_SECONDS[settings.mode]) as store, \
            contextlib.ExitStack() as stack:
        for note in store.notes:
            print(note)
        bar = tqdm(total=total, initial=len(store.done), desc=f"sweep ({settings.mode})",
                   unit="task", disable=not progress or headless())
        prov = provenance(device_name)
        todo = (task for task in grid.tasks(settings.mode) if task.id not in store.done)
        if on_ray_gpus:  # one point per Ray task, one GPU each; a crashed worker is a row
            gpus = Ray(executor.address, batch=1, num_gpus=1, on_crash=lambda item, error: _crashed_rows(*item, error))
            done = gpus.map(_measure_task_rows, ((grid, settings, device, task, time_model, prov) for task in todo))
        elif settings.mode == "model":
            done = executor.map(_model_task_rows, ((grid, task, time_model, prov) for task in todo))
        else:
            done = _local_task_rows(grid, settings, measurer, todo, time_model, prov, stack)
        for tid, rows in done:
            store.append(tid, tagged(tid, rows))
            bar.update(1)
            if after_task:
                after_task(tid)
        bar.close()
        store.compact(TaskIds(grid, settings.mode), to_frame)
    return load(out) if as_frame else Path(out)


def _measure_task_rows(grid: Grid, settings: RunSettings, make_device, task: Task, time_model: TimeModel,
                       prov: dict) -> tuple[str, list[dict]]:
    """One measured point on the Ray worker's GPU (``make_device``: a callable making the device
    layer there, default the CUDA GPU), with the node and GPU that measured it."""
    from .cluster import where

    measurer = Measurer(settings, make_device() if make_device is not None else None)
    rows = measure_task(grid, settings, measurer, task, time_model, {**prov, "device": measurer.device})
    for row in rows:
        row.update(where())
    return task.id, rows


def _crashed_rows(grid: Grid, settings: RunSettings, make_device, task: Task, time_model: TimeModel, prov: dict,
                  error: str) -> tuple[str, list[dict]]:
    """A point whose Ray worker died (the process, not the step, ran out): recorded, not retried."""
    row = base_row(grid, task, task.budgets_mb[0], task.frees_gib[0], "measure")
    row.update(peak_bytes=None, peak_transient_bytes=None, oom=None, time_ms=None,
               error=f"the Ray worker died: {error}", **prov)
    return task.id, [row]


def _local_task_rows(grid: Grid, settings: RunSettings, measurer, todo, time_model: TimeModel, prov: dict, stack):
    """(task id, rows) of each trace or measure task, computed here, in grid order."""
    replayers = {}  # backend 'replay': one running replay per release, vLLM imported once
    for task in todo:
        if settings.mode == "trace":
            if settings.backend == "replay" and task.engine not in replayers:
                from ..run.replay import ReplayProcess
                replayers[task.engine] = stack.enter_context(ReplayProcess(task.engine))
            rows = trace_task(grid, settings, task, time_model, prov, replayers)
        else:
            rows = measure_task(grid, settings, measurer, task, time_model, prov)
        yield task.id, rows


class TaskIds:
    """The task ids of a grid in order, generated afresh on each iteration."""

    def __init__(self, grid: Grid, mode: str):
        self.grid, self.mode = grid, mode

    def __iter__(self):
        return (task.id for task in self.grid.tasks(self.mode))


def at_free_memory(frame, free_gib: float):
    """Model-mode rows moved to another free memory: only ``free_gib``, ``oom`` and ``oom_line``
    change, as no plan depends on it (except SGLang's own chunker, whose budget is measured from it:
    recompute those rows instead)."""
    import pandas as pd

    measured = frame[["engine", "strategy"]].drop_duplicates()
    if any(get_strategy(s).budget_source(get_engine(e)) == MEASURED_BUDGET
           for e, s in measured.itertuples(index=False)):
        raise ValueError("SGLang's own chunker plans with the budget it measures from free memory: "
                         "recompute its rows for another free GiB")
    moved = frame.copy()
    moved["free_gib"] = float(free_gib)
    decode = moved["decode_bytes"].fillna(0) if "decode_bytes" in moved else 0
    oom, line = step_verdict(moved["peak_transient_bytes"].to_numpy("int64"), np.asarray(decode, dtype="int64"),
                             free_bytes_from_gib(free_gib))
    moved["oom"] = pd.array(oom, dtype="boolean")
    moved["oom_line"] = pd.array(line, dtype="string")
    return moved


def load(path: str | Path):
    """A finished sweep table, as a DataFrame."""
    import pandas as pd

    return pd.read_parquet(path)
