"""Notebook parameters: the names each notebook takes, and one check for all of them.

A notebook's first cell after its ``parameters`` cell calls ``check(...)``; the
headless runner calls it too before starting a kernel.  An unknown name, a wrong
type or an impossible value raises ``ParameterError`` with one line naming the
notebook, the parameter and the rule, before any work is done.
"""
from __future__ import annotations

import importlib.util
import math

from ..engines import get_engine
from ..padding import DEEPGEMM_RULES
from ..plan import ALL_STRATEGIES
from ..shapes import MODELS
from ..study.cluster import host_port
from ..study.sweep import EXECUTORS, MODES
from ..workload import WORKLOAD_SOURCES


class ParameterError(ValueError):
    """A bad notebook parameter (one line: notebook, name, rule)."""


# kind, rule: kinds are int, number, str, str? (a string or None), bool, ints, numbers, strs (lists),
# ints? (a list or None)
_COMMON = {
    "model": ("str", tuple(MODELS)),
    "free_gib": ("number", ">=0"),
    # the engine release planned on (a bare vllm or sglang: its latest); default: the latest vLLM
    "engine": ("str", "engine release"),
    # None: the engine's own DeepGEMM; a version: our strategies on that build instead
    "deepgemm_version": ("str?", tuple(DEEPGEMM_RULES)),
    "output_dir": ("str", None),
    "data_dir": ("str", None),
}
_GRID = {
    "concurrency": ("ints", ">0"),
    "isl": ("ints", ">0"),
    "osl": ("int", ">0"),
    "budget_mb": ("numbers", ">0"),
    "strategies": ("strs", tuple(ALL_STRATEGIES)),
    "max_num_batched_tokens": ("int", ">0"),
    "long_prefill_token_threshold": ("int", ">=0"),
    "shared_prefix": ("int", ">=0"),
}
SPECS = {
    "01_oom_frontier": {**_COMMON, **_GRID,
                        # null: 2,048 up to the model's max_model_len (frontier.default_isl)
                        "isl": ("ints?", ">0"),
                        "mode": ("str", MODES), "backend": ("str", None),
                        "workload_source": ("str", WORKLOAD_SOURCES),
                        "engines": ("strs", "engine release"),
                        "long_concurrency": ("ints", ">0"),
                        "long_isl": ("ints?", ">0"),  # null: 131,072 and max_model_len
                        "long_budget_mb": ("numbers", ">0"),
                        # the frontier sweep on a Ray cluster (the cluster extra): None starts a
                        # local instance, "auto" joins this machine's cluster, "ray://HOST:PORT"
                        "executor": ("str", EXECUTORS), "ray_address": ("str?", "ray address"),
                        "dashboard": ("bool", None)},
    "02_chunk_overhead": {**_COMMON, "budget_mb": ("numbers", ">0"),
                          "strategies": ("strs", tuple(ALL_STRATEGIES)),
                          "max_overhead": ("number", ">0")},
    "03_strategies": {**_COMMON, **{k: v for k, v in _GRID.items() if k != "budget_mb"},
                      "budget": ("number", ">0")},
    "04_beyond": {**_COMMON, **_GRID,
                  "prompt_len": ("int", ">0"), "step_tokens": ("int", ">0"),
                  "reserved_budget_mb": ("numbers", ">0"),
                  "policy_free_start_gib": ("number", ">0"), "policy_free_end_gib": ("number", ">0"),
                  "policy_steps": ("int", ">0"), "auto_budgets_mb": ("numbers", ">0"),
                  "widgets": ("bool", None)},
}


def _kind_ok(kind: str, value) -> bool:
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def is_number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    single = {"int": is_int, "number": is_number, "str": lambda v: isinstance(v, str),
              "str?": lambda v: v is None or isinstance(v, str), "bool": lambda v: isinstance(v, bool)}
    if kind in single:
        return single[kind](value)
    if kind == "ints?" and value is None:
        return True
    item = single[{"ints": "int", "ints?": "int", "numbers": "number", "strs": "str"}[kind]]
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(item(v) for v in value)


_KIND_WORDS = {"int": "a whole number", "number": "a number", "str": "a string",
               "str?": "a string or null",
               "bool": "true or false", "ints": "a non-empty list of whole numbers",
               "ints?": "a non-empty list of whole numbers, or null",
               "numbers": "a non-empty list of numbers", "strs": "a non-empty list of strings"}


def check_one(notebook: str, name: str, value) -> None:
    spec = SPECS[notebook]
    where = f"{notebook}.ipynb parameter {name!r}"
    if name not in spec:
        raise ParameterError(f"{where}: unknown name (known: {', '.join(sorted(spec))})")
    kind, rule = spec[name]
    if not _kind_ok(kind, value):
        raise ParameterError(f"{where} = {value!r}: must be {_KIND_WORDS[kind]}")
    values = value if isinstance(value, (list, tuple)) else [value]
    if kind in ("number", "numbers") and not all(math.isfinite(v) for v in values):
        raise ParameterError(f"{where} = {value!r}: must be a finite number")
    for v in values:
        if v is None and kind in ("str?", "ints?"):
            continue
        if isinstance(rule, tuple) and v not in rule:
            raise ParameterError(f"{where} = {v!r}: must be one of {', '.join(rule)}")
        if rule == "engine release":
            try:
                get_engine(v)
            except ValueError as e:  # its message lists every known release, compactly
                raise ParameterError(f"{where} = {v!r}: {e}") from None
        if rule == "ray address":
            try:
                host_port(v)
            except ValueError:
                raise ParameterError(f"{where} = {v!r}: must be null (a new local instance), 'auto' "
                                     "(this machine's cluster), 'ray://HOST:PORT' or 'HOST:PORT'") from None
        if rule == ">0" and not v > 0:
            raise ParameterError(f"{where} = {v!r}: must be > 0")
        if rule == ">=0" and not v >= 0:
            raise ParameterError(f"{where} = {v!r}: must be >= 0")


def check_values(notebook: str, values: dict) -> dict:
    """Check a dict of parameters (the runner's YAML); return it unchanged."""
    if notebook not in SPECS:
        raise ParameterError(f"unknown notebook {notebook!r}: must be one of {', '.join(SPECS)}")
    for name, value in values.items():
        check_one(notebook, name, value)
    check_together(notebook, values)
    return values


def check_together(notebook: str, values: dict) -> None:
    """Values that are each fine but impossible together (or on this machine)."""
    where = f"{notebook}.ipynb parameter"
    for name in ("isl", "long_isl"):
        if values.get(name) is not None and "model" in values:
            limit = MODELS[values["model"]].max_model_len
            too_long = [i for i in values[name] if i > limit]
            if too_long:
                raise ParameterError(f"{where} {name!r} = {too_long[0]!r}: longer than "
                                     f"{values['model']}'s max_model_len {limit}")
    isl = values.get("isl")
    if isl is None and "model" in values:
        from ..study.frontier import default_isl

        isl = default_isl(values["model"])
    if "shared_prefix" in values and isl is not None and values["shared_prefix"] > max(isl):
        raise ParameterError(f"{where} 'shared_prefix' = {values['shared_prefix']!r}: longer than "
                             f"every isl (at most {max(isl)}), so no point is left")
    on_ray = values.get("executor") == "ray"
    if on_ray and values.get("mode") == "trace":
        raise ParameterError(f"{where} 'executor' = 'ray': runs model and measure sweeps; "
                             "mode 'trace' runs locally")
    if on_ray and importlib.util.find_spec("ray") is None:
        raise ParameterError(f"{where} 'executor' = 'ray': needs Ray, not installed here "
                             '(pip install -e ".[cluster]")')
    if values.get("ray_address") is not None and not on_ray:
        raise ParameterError(f"{where} 'ray_address' = {values['ray_address']!r}: used only "
                             "with executor 'ray'")
    # on Ray the cluster's GPUs measure (sweep.run checks it has one), not this machine's
    if values.get("mode") == "measure" and not on_ray:
        import torch

        if not torch.cuda.is_available():
            raise ParameterError(f"{where} 'mode' = 'measure': needs a CUDA GPU and torch sees "
                                 "none here (use 'model' or 'trace')")


def check(notebook: str, namespace: dict, before: set) -> dict:
    """Check the names a notebook's parameters cell (and papermill's injected cell)
    defined: every name in ``namespace`` that was not in ``before``."""
    values = {k: v for k, v in namespace.items() if k not in before and not k.startswith("_")}
    check_values(notebook, values)
    missing = sorted(set(SPECS[notebook]) - set(values))
    if missing:
        raise ParameterError(f"{notebook}.ipynb: parameters cell lacks {', '.join(missing)}")
    return values


class ParameterHandler:
    """Used in a notebook: ``P = ParameterHandler(globals())`` before the parameters
    cell, ``params = P.check("01_oom_frontier", globals())`` after it."""

    def __init__(self, namespace: dict):
        self.before = set(namespace) | {"P"}

    def check(self, notebook: str, namespace: dict) -> dict:
        try:
            return check(notebook, namespace, self.before)
        except ParameterError as e:
            # one clear line in the notebook, no library traceback
            raise ParameterError(str(e)).with_traceback(None) from None
