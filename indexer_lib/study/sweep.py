"""Sweeps: a grid of workloads x strategies x budgets, run in one of three modes.

- ``model``: scheduler simulator + planners + memory model (CPU, fast);
- ``trace``: the tracer's peak bytes of each worst step (the executor's real
  allocations, replayed without a GPU);
- ``measure``: the worst step executed on a CUDA GPU: OOM caught, time measured.

Results are one tidy table (one row per point x strategy) in a resumable store
(``indexer_lib.study.store``): a task is durable before the next starts, a restart
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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from . import frontier
from ..memory import topk_buffer_bytes, workspace_bytes
from ..engines import DEFAULT_ENGINE, get_engine
from ..plan import asked_deepgemm, make_plan
from ..shapes import GIB, free_bytes_from_gib, get_model
from .results import git_state
from .store import ResultStore
from .timemodel import TimeModel, plan_features
from ..workload import ClosedLoopWorkload, SchedulerConfig, check_int, check_source

MODES = ("model", "trace", "measure")


@dataclass(frozen=True)
class SweepGrid:
    """Every axis is a tuple; the grid is their product (shared prefixes longer
    than a prompt are skipped, as such a point cannot exist)."""

    model: tuple[str, ...] = ("glm-5",)
    concurrency: tuple[int, ...] = (1, 4, 8, 16, 24, 32, 48, 64)
    isl: tuple[int, ...] = (2048, 4096, 8192, 10240, 16384, 32768)
    osl: tuple[int, ...] = (64,)
    budget_mb: tuple[float, ...] = (64, 128, 256, 512, 1024, 2048)
    strategy: tuple[str, ...] = ("n-only", "vllm", "per-request", "causal")
    free_gib: tuple[float, ...] = (2.63,)
    shared_prefix: tuple[int, ...] = (0,)
    max_num_batched_tokens: tuple[int, ...] = (8192,)
    max_num_seqs: tuple[int, ...] = (256,)
    long_prefill_token_threshold: tuple[int, ...] = (256,)
    async_scheduling: bool = False
    # None: each engine's own DeepGEMM; a version: the project's strategies on that build instead
    deepgemm_version: str | None = None
    padded: bool = True
    workload_source: str = "simulator"
    # engine releases (ENGINE==RELEASE; a bare vllm or sglang: its latest): each plans on its
    # own DeepGEMM, workspace and layout; the ``engine`` strategy is its own chunker
    engine: tuple[str, ...] = (DEFAULT_ENGINE,)

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):  # YAML and JSON give lists: keep the grid hashable
                object.__setattr__(self, f.name, tuple(value))
            elif f.type.startswith("tuple") and not isinstance(value, tuple):
                object.__setattr__(self, f.name, (value,))
            if f.type.startswith("tuple") and not getattr(self, f.name):
                raise ValueError(f"{f.name} is empty: the grid needs at least one value")
        frontier.check_grid_values(self.strategy, self.budget_mb, self.free_gib)
        frontier.check_workload_axes(self.concurrency, self.osl)  # bounded above too: the simulator runs them
        for name, minimum in (("isl", 1), ("shared_prefix", 0), ("max_num_batched_tokens", 1), ("max_num_seqs", 1),
                              ("long_prefill_token_threshold", 0)):
            for v in getattr(self, name):
                check_int(name, v, minimum)
        for m in self.model:
            frontier.check_isl(m, self.isl)
        check_source(self.workload_source)
        # the releases' full names: a grid means the same whatever release is newest later
        object.__setattr__(self, "engine", tuple(dict.fromkeys(get_engine(e).name for e in self.engine)))
        frontier.check_engine_strategies(self.engine, self.strategy, self.deepgemm_version)

    def workloads(self):
        """(model, workload, scheduler config) for every workload of the grid, in order."""
        for model, conc, isl, osl, prefix, mnbt, seqs, thr in itertools.product(
                self.model, self.concurrency, self.isl, self.osl, self.shared_prefix,
                self.max_num_batched_tokens, self.max_num_seqs,
                self.long_prefill_token_threshold):
            if prefix > isl:
                continue
            config = SchedulerConfig(mnbt, seqs, thr, block_size=get_model(model).kv_block,
                                     async_scheduling=self.async_scheduling)
            yield model, ClosedLoopWorkload(conc, isl, osl, prefix), config

    @property
    def num_rows(self) -> int:
        n_workloads = sum(1 for _ in self.workloads())
        budgets = sum(len(frontier.grid_budgets(self.budget_mb, e, s))
                      for e, s in itertools.product(self.engine, self.strategy))
        return n_workloads * budgets * len(self.free_gib)


@dataclass(frozen=True)
class RunSettings:
    """How a sweep runs; part of what identifies its result file."""

    mode: str = "model"
    # trace / measure: the kernels backend; trace with "engine": the `engine` strategy's worst
    # steps replayed through the release's own code (``study.replay``) instead of our executor
    backend: str = "reference"
    seed: int = 0  # measure: inputs
    repeats: int = 3  # measure: timed runs per point (after one warm-up)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}: must be one of {', '.join(MODES)}")
        if self.backend == "engine" and self.mode != "trace":
            raise ValueError(f"backend 'engine' replays the engine's own code on the meta device: "
                             f"mode must be 'trace', not {self.mode!r}")
        check_int("repeats", self.repeats, 1)


def spec_of(grid: SweepGrid, settings: RunSettings) -> dict:
    spec = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(grid).items()}
    spec.update(asdict(settings))
    if settings.mode == "model":  # backend, seed and repeats do not change modelled rows
        for k in ("backend", "seed", "repeats"):
            spec.pop(k)
    return spec


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

def task_id(model, workload, config, engine, strategy, budget_mb=None, free_gib=None) -> str:
    parts = [model, f"c{workload.concurrency}", f"isl{workload.isl}", f"osl{workload.osl}",
             f"prefix{workload.shared_prefix}", f"mnbt{config.max_num_batched_tokens}",
             f"seqs{config.max_num_seqs}", f"thr{config.long_prefill_token_threshold}", engine,
             strategy]
    if budget_mb is not None:  # None: the strategy reads no budget
        parts.append(f"budget{budget_mb:g}")
    if free_gib is not None:
        parts.append(f"free{free_gib:g}")
    return "|".join(parts)


def tasks(grid: SweepGrid, mode: str):
    """(task id, model, workload, config, engine, strategy, budgets, free GiBs) in grid order.

    A model task covers every budget and free GiB of a workload x strategy (one
    schedule, plans shared across budgets); a trace task one budget; a measure
    task one budget and one free GiB, so each GPU run is durable on its own.
    """
    for model, workload, config in grid.workloads():
        for engine, strategy in itertools.product(grid.engine, grid.strategy):
            head = (model, workload, config, engine, strategy)
            # a strategy that reads no budget_mb is planned, traced and measured once
            budgets = frontier.grid_budgets(grid.budget_mb, engine, strategy)
            if mode == "model":
                yield (task_id(*head), *head, budgets, grid.free_gib)
            elif mode == "trace":
                for mb in budgets:
                    yield (task_id(*head, mb), *head, (mb,), grid.free_gib)
            else:
                for mb, free in itertools.product(budgets, grid.free_gib):
                    yield (task_id(*head, mb, free), *head, (mb,), (free,))


@functools.lru_cache(maxsize=256)  # dashboards replan the same schedules; bounded memory
def schedule_of(workload, config, source: str) -> frontier.Schedule:
    """The prefill step batches of a workload, from the simulator or vLLM, grouped."""
    return frontier.Schedule(frontier.prefill_batches(workload, config, source))


def plan_of(batch, strategy, budget_bytes, model, grid, engine):
    """A step's plan on the grid's engine (on its own DeepGEMM unless the grid names one)."""
    return make_plan(batch, strategy, budget_bytes, None, model, asked_deepgemm(strategy, grid.deepgemm_version),
                     grid.padded, engine=engine)


def base_row(grid, model, workload, config, engine, strategy, budget_mb, free_gib, mode) -> dict:
    return {
        "mode": mode, "model": model, "engine": engine, "concurrency": workload.concurrency,
        "isl": workload.isl,
        "osl": workload.osl, "shared_prefix": workload.shared_prefix,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "max_num_seqs": config.max_num_seqs,
        "long_prefill_token_threshold": config.long_prefill_token_threshold,
        "async_scheduling": config.async_scheduling,
        "workload_source": grid.workload_source,
        "deepgemm_version": frontier.deepgemm_of(engine, grid.deepgemm_version, strategy),
        "padded_budget": grid.padded and strategy != "engine", "strategy": strategy,
        "budget_mb": None if budget_mb is None else float(budget_mb),  # None: the strategy reads no budget
        "free_gib": float(free_gib),
    }


def worst_step_detail(schedule, w, engine, strategy, model, grid, time_model) -> tuple[dict, object]:
    """The plan of a worst step and what the tables report about it."""
    batch = next(b for b in schedule.batches if b.step == w.worst_step)
    plan = plan_of(batch, strategy, w.budget_bytes, model, grid, engine)
    f = plan_features(plan)
    detail = {
        "budget_bytes": -1 if w.budget_bytes is None else w.budget_bytes,
        "worst_step": w.worst_step, "worst_rows": w.worst_rows,
        "worst_kv_tokens": w.worst_kv_tokens, "worst_requests": len(batch.requests),
        "worst_chunks": w.worst_chunks, "worst_gathers": f["gathers"],
        "worst_allocated_logits_bytes": f["allocated_logits_bytes"],
        "worst_useful_elements": f["useful_elements"],
        "worst_gathered_kv_tokens": f["gathered_kv_tokens"],
        "max_chunks": w.max_chunks, "total_chunks": w.total_chunks, "over_budget": w.over_budget,
        "model_peak_bytes": w.peak_bytes, "model_peak_transient_bytes": w.peak_transient_bytes,
        "model_time_ms": time_model.features_ms(f),
    }
    return detail, plan


def model_task(grid, model, workload, config, engine, strategy, budgets_mb, frees, time_model,
               prov) -> list[dict]:
    schedule = schedule_of(workload, config, grid.workload_source)
    # the grid's budgets serve every free GiB, unless the engine measures its own from free memory
    groups = [(f,) for f in frees] if frontier.measured_budget(engine, strategy) else [tuple(frees)]
    rows = []
    for group in groups:
        budgets = [frontier.budget_of(engine, strategy, mb, group[0]) for mb in budgets_mb]
        outcomes = frontier.worst_steps(schedule, strategy, budgets, model=model,
                                        deepgemm_version=grid.deepgemm_version, padded=grid.padded,
                                        topk_rows=config.max_num_batched_tokens, engine=engine)
        for mb, w in zip(budgets_mb, outcomes):
            detail, _ = worst_step_detail(schedule, w, engine, strategy, model, grid, time_model)
            for free in group:
                row = base_row(grid, model, workload, config, engine, strategy, mb, free, "model")
                row.update(detail)
                row.update(peak_bytes=w.peak_bytes, peak_transient_bytes=w.peak_transient_bytes,
                           oom=w.peak_transient_bytes > free_bytes_from_gib(free), time_ms=None,
                           error=None, **prov)
                rows.append(row)
    return rows


def _model_worst(grid, model, workload, config, engine, strategy, budget_bytes, time_model, backend):
    """The modelled worst step, counting the temporaries of the backend that will run it."""
    schedule = schedule_of(workload, config, grid.workload_source)
    w = frontier.worst_step(schedule, strategy, budget_bytes, model=model,
                            deepgemm_version=grid.deepgemm_version, padded=grid.padded,
                            topk_rows=config.max_num_batched_tokens, temporaries=backend,
                            engine=engine)
    return worst_step_detail(schedule, w, engine, strategy, model, grid, time_model)


def check_replay(grid: SweepGrid) -> None:
    """ValueError, before any work, for a grid the engine replay cannot run: only the ``engine``
    strategy, on releases whose path is replayed and installed here."""
    from .replay import engine_python

    others = [s for s in grid.strategy if s != "engine"]
    if others:
        raise ValueError(f"backend 'engine' replays the engine's own chunker: strategy {others[0]!r} "
                         "is ours (trace it with backend 'reference' or 'deepgemm')")
    for engine in grid.engine:
        engine_python(engine)


def _replay_peaks(plan, config, process) -> tuple[int, int]:
    """(peak, peak minus the persistent buffers) of a worst step, replayed by the engine's code."""
    from .replay import replay_steps

    budget = plan.budget_bytes
    if budget is not None and budget % (1 << 20):
        raise ValueError(f"budget {budget} bytes: the engine's budget is a whole number of MiB")
    (r,) = replay_steps(process.profile, plan.model, [(plan.batch.query_lens, plan.batch.seq_lens,
                                                      None if budget is None else budget >> 20)],
                        max_num_batched_tokens=config.max_num_batched_tokens, process=process)
    return r.peak_bytes, r.peak_bytes - r.persistent_bytes


def trace_task(grid, settings, model, workload, config, engine, strategy, budgets_mb, frees,
               time_model, prov, replayers=None) -> list[dict]:
    """``replayers``: engine -> ``replay.ReplayProcess`` (backend 'engine')."""
    from ..run.tracer import trace  # torch: only trace mode needs it

    (mb,) = budgets_mb
    traced_by_budget = {}  # one trace per distinct budget (SGLang's depends on free memory)
    rows = []
    for free in frees:
        budget = frontier.budget_of(engine, strategy, mb, free)
        if budget not in traced_by_budget:
            detail, plan = _model_worst(grid, model, workload, config, engine, strategy, budget,
                                         time_model, settings.backend)
            if settings.backend == "engine":
                peaks = _replay_peaks(plan, config, replayers[engine])
            else:
                result = trace(plan, topk_rows=config.max_num_batched_tokens, backend=settings.backend)
                peaks = int(result.peak_bytes), int(result.peak_transient)
            traced_by_budget[budget] = (detail, *peaks)
        detail, traced, transient = traced_by_budget[budget]
        row = base_row(grid, model, workload, config, engine, strategy, mb, free, "trace")
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
        persistent = workspace_bytes(plan) + topk_buffer_bytes(plan, topk_rows)
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


def measure_task(grid, settings, measurer, model, workload, config, engine, strategy, budgets_mb,
                 frees, time_model, prov) -> list[dict]:
    (mb,), (free,) = budgets_mb, frees
    detail, plan = _model_worst(grid, model, workload, config, engine, strategy,
                                 frontier.budget_of(engine, strategy, mb, free), time_model, settings.backend)
    result = measurer.run(plan, free, config.max_num_batched_tokens)
    row = base_row(grid, model, workload, config, engine, strategy, mb, free, "measure")
    row.update(detail)
    peak = result.get("measured_peak_bytes")
    row.update(peak_bytes=peak, peak_transient_bytes=peak, oom=result["oom"],
               time_ms=result.get("time_ms"), error=result["error"],
               reserved_after_bytes=result.get("reserved_after_bytes"),
               reserved_baseline_bytes=result.get("reserved_baseline_bytes"), **prov)
    return [row]


def model_rows(grid: SweepGrid, time_model: TimeModel | None = None):
    """Model-mode rows of a grid, computed in memory without a store (dashboards)."""
    time_model = time_model or TimeModel.published()
    for tid, *task in tasks(grid, "model"):
        for row in model_task(grid, *task, time_model, {}):
            row["task"] = tid
            yield row


# -- running a sweep ---------------------------------------------------------------

COLUMN_TYPES = {"time_ms": "float64", "peak_bytes": "Int64", "peak_transient_bytes": "Int64",
                "oom": "boolean", "error": "string", "reserved_after_bytes": "Int64",
                "reserved_baseline_bytes": "Int64"}
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


EXECUTORS = ("local", "ray")


def run(grid: SweepGrid, out: str | Path, settings: RunSettings = RunSettings(),
        progress: bool = True, after_task=None, time_model: TimeModel | None = None,
        device=None, as_frame: bool = True, executor: str = "local", address: str | None = None):
    """Run (or resume) a sweep into the Parquet table ``out``; return it as a DataFrame
    (``as_frame=False``: return the table's path, for grids too big to hold in memory).

    Memory does not grow with the grid: tasks are generated as they run, rows go
    to the journal and are streamed from it into the table.  ``after_task(task_id)``
    is called after each task is durable (tests use it); ``device``: measure
    mode's device layer (default: the CUDA GPU).  ``executor="ray"`` computes the tasks on a
    Ray cluster at ``address`` (``study.cluster``): model tasks in batches, each measured
    point a Ray task on one GPU (``device``: then a callable making the device layer in the
    worker; rows name the node and GPU).  This process stays the only writer and writes in
    grid order, so the journal and the table are the local run's.
    """
    from tqdm.auto import tqdm

    if executor not in EXECUTORS:
        raise ValueError(f"executor {executor!r}: must be one of {', '.join(EXECUTORS)}")
    if executor == "ray" and settings.mode == "trace":
        raise ValueError("executor 'ray' runs model and measure sweeps; mode 'trace' runs locally")
    spec = spec_of(grid, settings)
    header = {"grid_hash": spec_hash(spec), "spec": spec}
    time_model = time_model or TimeModel.published()
    total = sum(1 for _ in tasks(grid, settings.mode))
    on_ray_gpus = executor == "ray" and settings.mode == "measure"
    measurer = Measurer(settings, device) if settings.mode == "measure" and not on_ray_gpus else None
    device_name = measurer.device if measurer else "cpu"
    if settings.backend == "engine":
        check_replay(grid)
        device_name = "meta (the engine's own code, replayed)"
    if executor == "ray":
        from . import cluster
        cluster.connect(address)  # an unreachable cluster says so before the store is touched
        if on_ray_gpus and cluster.gpu_count(address) < 1:
            raise ValueError(f"the Ray cluster at {address or 'a new local instance'!r} has no GPU: "
                             "a measure sweep runs each point on one GPU")
        if on_ray_gpus:
            device_name = "the Ray worker's GPU"
    with ResultStore(out, header, sync_seconds=SYNC_SECONDS[settings.mode]) as store, \
            contextlib.ExitStack() as stack:
        for note in store.notes:
            print(note)
        bar = tqdm(total=total, initial=len(store.done), desc=f"sweep ({settings.mode})",
                   unit="task", disable=not progress)
        prov = provenance(device_name)
        todo = ((tid, tuple(task)) for tid, *task in tasks(grid, settings.mode) if tid not in store.done)
        if on_ray_gpus:  # one point per Ray task, one GPU each; a crashed worker is a row
            done = cluster.ordered_map(
                _measure_task_rows, ((grid, settings, device, tid, task, time_model, prov) for tid, task in todo),
                address, batch=1, num_gpus=1,
                on_crash=lambda item, error: _crashed_rows(*item, error))
        elif executor == "ray":
            done = cluster.ordered_map(_model_task_rows,
                                       ((grid, tid, task, time_model, prov) for tid, task in todo), address)
        else:
            done = _local_task_rows(grid, settings, measurer, todo, time_model, prov, stack)
        for tid, rows in done:
            for row in rows:
                row["task"] = tid
            store.append(tid, rows)
            bar.update(1)
            if after_task:
                after_task(tid)
        bar.close()
        store.compact(TaskIds(grid, settings.mode), to_frame)
    return load(out) if as_frame else Path(out)


def _model_task_rows(grid, tid, task, time_model, prov) -> tuple[str, list[dict]]:
    """One model task where it runs (a Ray worker): its id and rows."""
    return tid, model_task(grid, *task, time_model, prov)


def _measure_task_rows(grid, settings, make_device, tid, task, time_model, prov) -> tuple[str, list[dict]]:
    """One measured point on the Ray worker's GPU (``make_device``: a callable making the device
    layer there, default the CUDA GPU), with the node and GPU that measured it."""
    from .cluster import where

    measurer = Measurer(settings, make_device() if make_device is not None else None)
    rows = measure_task(grid, settings, measurer, *task, time_model, {**prov, "device": measurer.device})
    for row in rows:
        row.update(where())
    return tid, rows


def _crashed_rows(grid, settings, make_device, tid, task, time_model, prov, error) -> tuple[str, list[dict]]:
    """A point whose Ray worker died (the process, not the step, ran out): recorded, not retried."""
    model, workload, config, engine, strategy, (mb,), (free,) = task
    row = base_row(grid, model, workload, config, engine, strategy, mb, free, "measure")
    row.update(peak_bytes=None, peak_transient_bytes=None, oom=None, time_ms=None,
               error=f"the Ray worker died: {error}", **prov)
    return tid, [row]


def _local_task_rows(grid, settings, measurer, todo, time_model, prov, stack):
    """(task id, rows) of each task, computed here, in grid order."""
    replayers = {}  # backend 'engine': one running replay per release, vLLM imported once
    for tid, task in todo:
        args = (*task, time_model)
        if settings.mode == "model":
            rows = model_task(grid, *args, prov)
        elif settings.mode == "trace":
            engine = task[3]
            if settings.backend == "engine" and engine not in replayers:
                from .replay import ReplayProcess
                replayers[engine] = stack.enter_context(ReplayProcess(engine))
            rows = trace_task(grid, settings, *args, prov, replayers)
        else:
            rows = measure_task(grid, settings, measurer, *args, prov)
        yield tid, rows


class TaskIds:
    """The task ids of a grid in order, generated afresh on each iteration."""

    def __init__(self, grid: SweepGrid, mode: str):
        self.grid, self.mode = grid, mode

    def __iter__(self):
        return (t[0] for t in tasks(self.grid, self.mode))


def at_free_memory(frame, free_gib: float):
    """Model-mode rows moved to another free memory: only ``free_gib`` and ``oom`` change, as
    no plan depends on it (except SGLang's own chunker, whose budget is measured from it:
    recompute those rows instead)."""
    measured = frame[["engine", "strategy"]].drop_duplicates()
    if any(frontier.measured_budget(e, s) for e, s in measured.itertuples(index=False)):
        raise ValueError("SGLang's own chunker plans with the budget it measures from free memory: "
                         "recompute its rows for another free GiB")
    moved = frame.copy()
    moved["free_gib"] = float(free_gib)
    moved["oom"] = (moved["peak_transient_bytes"] > free_bytes_from_gib(free_gib)).astype("boolean")
    return moved


def load(path: str | Path):
    """A finished sweep table, as a DataFrame."""
    import pandas as pd

    return pd.read_parquet(path)
