"""Notebook parameters: the names each notebook takes, checked by the objects the notebook builds.

A notebook's first cell after its ``parameters`` cell calls ``P.check(...)``; the headless
runner calls ``check_values`` before starting a kernel.  Each notebook's parameters are a
pydantic model (strict types, no unknown names), and their values are checked by building what
the notebook builds from them: its plan settings and its grids (``sweep.grid.Grid``), whose own
checks name the bad value and the rule.  A bad parameter raises ``ParameterError`` with one line
naming the notebook, the parameter and the rule, before any work is done.
"""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..checks import BadValue, check_int
from ..engines import get_engine, release_scheduler
from ..plan import PlanSettings, get_strategy
from ..presets import budget_bytes_from_mb, free_bytes_from_gib, get_model
from ..sweep.cluster import host_port
from ..sweep.grid import Grid
from ..workload import ClosedLoopWorkload, SchedulerConfig
from ..workload.lengths import check_range_ratio, longest_isl

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
BY_MODEL = "by-model"  # whose temporaries a model's plans count: see Parameters.settings


# a number as given (an int stays an int, so a message shows the value the user wrote)
Number = float | int


class ParameterError(ValueError):
    """A bad notebook parameter (one line: notebook, name, rule)."""


class Parameters(BaseModel):
    """What every notebook takes; each notebook's model adds its own."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    notebook: ClassVar[str]

    model: str
    free_gib: Number  # memory free for the indexer at run time (after weights, KV cache, buffers)
    engine: str  # the engine release planned on (a bare vllm or sglang: its latest)
    # the GPU (data/gpus/): the release's scheduler defaults on it, SGLang's budget cap; optional,
    # so a parameters cell written before GPUs were data still runs (on an H200)
    gpu: str = "h200"
    deepgemm_version: str | None  # None: the engine's own DeepGEMM; a version: our strategies on it
    output_dir: str
    data_dir: str

    def settings(self, temporaries: str | None = BY_MODEL) -> PlanSettings:
        """The plan settings the notebook's parameters name; temporaries by default the CPU
        reference executor's, or the H200 path's for a compressed-K indexer (DeepSeek-V4), which
        the reference executor does not compute."""
        if temporaries == BY_MODEL:
            temporaries = "deepgemm" if get_model(self.model).compressed else "reference"
        return PlanSettings(self.model, self.engine, self.deepgemm_version, temporaries=temporaries, gpu=self.gpu)

    def checks(self):
        """(parameter, check) pairs: each check builds what the notebook builds from the parameter
        (and the others); a ``BadValue`` it raises names the object's own setting, which
        ``renamed`` maps to the notebook's parameter."""
        yield "settings", lambda: self.settings()
        yield "free_gib", lambda: free_bytes_from_gib(self.free_gib)

    renamed: ClassVar[dict[str, str]] = {}  # the objects' setting -> the notebook's parameter


class GridParameters(Parameters):
    """The frontier grid a notebook sweeps (notebooks 01, 03, 04)."""

    concurrency: list[int]
    isl: list[int] | None  # None: 2,048 up to the model's max_model_len
    osl: int
    strategies: list[str]  # engine: the release's own chunker; the others: what it could do instead
    max_num_batched_tokens: int | None  # None: the engine release's default (8192 on an H200)
    long_prefill_token_threshold: int | None  # None: the engine release's default (0: no cap)
    shared_prefix: int
    # draft tokens per decode (speculative decoding, e.g. MTP); optional, so a parameters cell
    # written before it still runs (0: none, as the engines serve by default)
    speculative_tokens: int = 0

    renamed = {"strategy": "strategies"}

    def grid(self, **changes) -> Grid:
        """The grid of the notebook's sweep: every parameter that names a setting of the grid (or is
        ``renamed`` from one), with ``changes`` (another grid of the same settings)."""
        given = {name: getattr(self, self.renamed.get(name, name)) for name in Grid.setting_names()
                 if self.renamed.get(name, name) in type(self).model_fields}
        return Grid.of(**{**given, **changes})

    def scheduler(self) -> SchedulerConfig:
        """The scheduler of the notebook's engine release: its defaults, with the notebook's
        settings (not None) in their place."""
        return release_scheduler(self.engine, get_model(self.model).kv_block, self.gpu,
                                 max_num_batched_tokens=self.max_num_batched_tokens,
                                 long_prefill_token_threshold=self.long_prefill_token_threshold,
                                 speculative_tokens=self.speculative_tokens)

    def checks(self):
        yield from super().checks()
        yield "grid", lambda: self.grid()


class FrontierParameters(GridParameters):
    notebook = "01_oom_frontier"

    budget_mb: list[Number]
    mode: Literal["model", "trace", "measure"]  # measure needs a CUDA GPU
    backend: str  # kernels backend for trace / measure
    workload_source: Literal["simulator", "vllm"]
    engines: list[str]  # engine releases compared on the field's deployments
    long_concurrency: list[int]
    long_isl: list[int] | None  # None: 131,072 and the largest ISL whose longest prompt fits max_model_len
    long_budget_mb: list[Number]
    # mixed lengths in the frontier, its dashboard and the long-context grid: vLLM bench's
    # --random-range-ratio, a mix ("0.1x131072": a tenth of the prompts at 131,072 tokens; "": none)
    # and the seed of their draws (length_seed)
    random_range_ratio: Number = 0.0
    mix: str = ""
    length_seed: int = 0
    executor: Literal["local", "ray"]  # where the frontier grid runs
    ray_address: str | None  # None: a new local instance; "auto"; "ray://HOST:PORT"
    dashboard: bool

    def long_grid(self) -> Grid:
        """Long contexts (to the model's max_model_len): free memory x budget, with the notebook's
        prompt lengths.  By default at 131,072 and the largest ISL whose longest prompt fits
        max_model_len (max_model_len itself for prompts of one length; below it by 1 + R with a
        range ratio R), since vLLM refuses a longer prompt; ISLs given whose longest prompt passes
        it are left out, as in the frontier."""
        if self.long_isl:
            isl = self.long_isl
        else:
            top = longest_isl(get_model(self.model).max_model_len, check_range_ratio(self.random_range_ratio))
            isl = sorted({min(131_072, top), top})
        return self.grid(concurrency=self.long_concurrency, isl=isl, budget_mb=self.long_budget_mb, shared_prefix=0)

    def dashboard_grid(self, strategy: str) -> Grid:
        """The dashboard's axes; its ISL axis follows the model picked where ``isl`` is None."""
        return self.grid(strategy=(strategy,))

    def checks(self):
        yield from super().checks()
        for i, _ in enumerate(self.engines):
            yield "engines", lambda i=i: get_engine(self.engines[i])
        yield "long_grid", lambda: self.long_grid()
        yield "ray_address", lambda: self._check_executor()

    def _check_executor(self) -> None:
        on_ray = self.executor == "ray"
        if on_ray and self.mode == "trace":
            raise BadValue("executor", "executor 'ray' runs model and measure sweeps; mode 'trace' runs locally")
        if on_ray and importlib.util.find_spec("ray") is None:
            raise BadValue("executor", 'executor \'ray\' needs Ray, not installed here (pip install -e ".[cluster]")')
        if self.ray_address is not None:
            try:
                host_port(self.ray_address)
            except ValueError:
                raise BadValue("ray_address", f"ray_address {self.ray_address!r}: must be null (a new local "
                                              "instance), 'auto' (this machine's cluster), 'ray://HOST:PORT' or "
                                              "'HOST:PORT'") from None
            if not on_ray:
                raise BadValue("ray_address", f"ray_address {self.ray_address!r} is used only with executor 'ray'")
        # on Ray the cluster's GPUs measure (sweep.run checks it has one), not this machine's
        if self.mode == "measure" and not on_ray:
            import torch

            if not torch.cuda.is_available():
                raise BadValue("mode", "mode 'measure' needs a CUDA GPU and torch sees none here (use 'model' "
                                       "or 'trace')")

    renamed = {**GridParameters.renamed, "long_grid.concurrency": "long_concurrency", "long_grid.isl": "long_isl",
               "long_grid.budget_mb": "long_budget_mb", "long_grid.strategy": "strategies", "engines.engine": "engines"}


class OverheadParameters(Parameters):
    notebook = "02_chunk_overhead"

    budget_mb: list[Number]
    strategies: list[str]
    max_overhead: Number  # a budget "stops paying" when chunking costs more than this
    ttft_concurrency: int  # the closed-loop workload whose latency the budget costs
    ttft_isl: int
    ttft_osl: int

    renamed = {"strategy": "strategies"}

    def checks(self):
        yield from super().checks()
        yield "ttft_concurrency", lambda: ClosedLoopWorkload(self.ttft_concurrency, self.ttft_isl, self.ttft_osl)
        for i, _ in enumerate(self.budget_mb):
            yield "budget_mb", lambda i=i: budget_bytes_from_mb(self.budget_mb[i])
        for i, _ in enumerate(self.strategies):
            yield "strategies", lambda i=i: get_strategy(self.strategies[i]).runs_under(self.settings())
        yield "max_overhead", lambda: positive("max_overhead", self.max_overhead)


class StrategiesParameters(GridParameters):
    notebook = "03_strategies"

    budget: Number  # MiB, the logits budget every budgeted strategy gets

    renamed = {**GridParameters.renamed, "budget_mb": "budget"}


class BeyondParameters(GridParameters):
    notebook = "04_beyond"

    budget_mb: list[Number]
    prompt_len: int  # one long prompt, prefilled step_tokens at a time
    step_tokens: int
    reserved_budget_mb: list[Number]
    policy_free_start_gib: Number | None  # None: the stale-budget report's readings
    policy_free_end_gib: Number | None
    policy_steps: int
    auto_budgets_mb: list[Number]
    widgets: bool

    def checks(self):
        yield from super().checks()
        yield "prompt_len", lambda: check_int("prompt_len", self.prompt_len, 1)
        yield "step_tokens", lambda: check_int("step_tokens", self.step_tokens, 1)
        yield "policy_steps", lambda: check_int("policy_steps", self.policy_steps, 1)
        for name in ("reserved_budget_mb", "auto_budgets_mb"):
            for value in getattr(self, name):
                yield name, lambda value=value: budget_bytes_from_mb(value)
        for name in ("policy_free_start_gib", "policy_free_end_gib"):
            if getattr(self, name) is not None:
                yield name, lambda name=name: positive(name, getattr(self, name))


class DefaultPolicyParameters(BaseModel):
    """Notebook 05: the default-policy study (``study.default_policy``); it plans many models,
    engines and GPUs, so it takes none of the other notebooks' model, engine or GPU."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    notebook: ClassVar[str] = "05_default_policy"
    renamed: ClassVar[dict[str, str]] = {"budget_mb": "budgets_mb", "workload": "workloads"}

    engines: list[str]  # engine families: vllm, sglang, trtllm, atom
    models: list[str] | None  # None: every model the project plans
    gpus: list[str] | None  # None: every GPU in data/gpus/
    workloads: list[str]  # the planned deployments' workloads, CONCURRENCYxISLxOSL
    reproduce: bool  # the public reports' servers (data/field/reported_ledger.csv)
    field: bool  # data/field/deployments.csv
    budgets_mb: list[Number]  # vLLM's and ATOM's MiB, TensorRT-LLM's elements as MiB
    fractions: list[Number]  # SGLang's free-memory fractions
    buffers: list[str]  # --logits-buffer kinds
    strategies: list[str]  # the project's strategies: what a patched engine could do
    assumed_free_gib: Number  # free memory where the server split is not read (TensorRT-LLM, ATOM)
    output_dir: str
    data_dir: str

    def checks(self):
        from ..engines import ENGINES
        from ..plan.logits_buffer import KINDS
        from ..presets import get_gpu
        from ..study.default_policy import workload_of

        for value in self.engines:
            yield "engines", lambda value=value: _one_of("engines", value, ENGINES)
        for value in self.models or ():
            yield "models", lambda value=value: get_model(value)
        for value in self.gpus or ():
            yield "gpus", lambda value=value: get_gpu(value)
        for value in self.workloads:
            yield "workloads", lambda value=value: workload_of(value)
        for value in self.budgets_mb:
            yield "budgets_mb", lambda value=value: budget_bytes_from_mb(value)
        for value in self.fractions:
            yield "fractions", lambda value=value: _fraction("fractions", value)
        for value in self.buffers:
            yield "buffers", lambda value=value: _one_of("buffers", value, KINDS)
        for value in self.strategies:
            yield "strategies", lambda value=value: get_strategy(value)
        yield "assumed_free_gib", lambda: free_bytes_from_gib(self.assumed_free_gib)


def _fraction(name: str, value: Number) -> None:
    if not 0 < value <= 1:
        raise BadValue(name, f"{name} {value!r}: must be a fraction in (0, 1]")


def _one_of(name: str, value, known) -> None:
    if value not in known:
        raise BadValue(name, f"{name} {value!r}: must be one of {', '.join(map(str, known))}")


def positive(name: str, value: Number) -> None:
    if not 0 < value < float("inf"):
        raise BadValue(name, f"{name} {value!r}: must be a finite number > 0")


NOTEBOOK_PARAMETERS: dict[str, type[Parameters]] = {
    cls.notebook: cls for cls in (FrontierParameters, OverheadParameters, StrategiesParameters, BeyondParameters,
                                  DefaultPolicyParameters)}


def names(notebook: str) -> tuple[str, ...]:
    """The parameters a notebook takes."""
    return tuple(_notebook(notebook).model_fields)


def notebook_defaults(notebook: str) -> dict:
    """The literal values of a notebook's ``parameters`` cell (its defaults)."""
    nb = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    defaults = {}
    for node in ast.parse("".join(cell["source"])).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                defaults[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return defaults


def check_values(notebook: str, values: dict, complete: bool = False) -> Parameters:
    """The notebook's parameters from ``values`` (the others: its parameters cell's, unless
    ``complete``), checked: ParameterError with one line for the first bad one."""
    cls = _notebook(notebook)
    where = f"{notebook}.ipynb parameter"
    unknown = [k for k in values if k not in cls.model_fields]
    if unknown:
        raise ParameterError(f"{where} {unknown[0]!r}: unknown name (known: {', '.join(sorted(cls.model_fields))})")
    full = values if complete else {**notebook_defaults(notebook), **values}
    missing = [k for k, f in cls.model_fields.items() if k not in full and f.is_required()]
    if missing:
        raise ParameterError(f"{notebook}.ipynb: parameters cell lacks {', '.join(missing)}")
    try:
        params = cls(**{k: full[k] for k in cls.model_fields if k in full})
    except ValidationError as e:
        error = e.errors()[0]
        name = error["loc"][0]
        raise ParameterError(f"{where} {name!r} = {full[name]!r}: {error['msg']}") from None
    for checked, check in params.checks():
        try:
            check()
        except BadValue as e:
            name = cls.renamed.get(f"{checked}.{e.name}") or cls.renamed.get(e.name) or e.name
            name = name if name in cls.model_fields else checked
            raise ParameterError(f"{where} {name!r}: {e}") from None
    return params


def check(notebook: str, namespace: dict, before: set) -> Parameters:
    """Check the names a notebook's parameters cell (and papermill's injected cell) defined:
    every name in ``namespace`` that was not in ``before``."""
    values = {k: v for k, v in namespace.items() if k not in before and not k.startswith("_")}
    return check_values(notebook, values, complete=True)


def _notebook(notebook: str) -> type[Parameters]:
    if notebook not in NOTEBOOK_PARAMETERS:
        raise ParameterError(f"unknown notebook {notebook!r}: must be one of {', '.join(NOTEBOOK_PARAMETERS)}")
    return NOTEBOOK_PARAMETERS[notebook]


class ParameterHandler:
    """Used in a notebook: ``P = ParameterHandler(globals())`` before the parameters cell,
    ``params = P.check("01_oom_frontier", globals())`` after it."""

    def __init__(self, namespace: dict):
        self.before = set(namespace) | {"P"}

    def check(self, notebook: str, namespace: dict) -> Parameters:
        try:
            return check(notebook, namespace, self.before)
        except ParameterError as e:
            # one clear line in the notebook, no library traceback
            raise ParameterError(str(e)).with_traceback(None) from None
