"""Run SGLang's own DSA indexer budget and row-chunk code on a CPU, call after call.

``python sglang_chunks.py SRC`` where SRC is an unpacked sglang wheel (scripts/install_engines.sh
makes one).  What runs is the release's code: ``mqa_logits_utils.py`` (0.5.21 on; before it the
same rules are ``Indexer._get_mqa_logits_budget_bytes`` and ``_should_chunk_mqa_logits``, lifted
with their ``_is_hip``) and ``environ.py`` as modules, and from
``dsa/dsa_indexer.py`` the method ``Indexer._get_mqa_logits_budget_bytes`` (with its
class-level cache) and the statements of ``Indexer._get_topk_ragged`` that size and walk
the row chunks, lifted with ``ast`` because that module imports GPU kernels.  Stubbed,
as a CPU has none of them: the device's total memory, ``mem_fraction_static`` (the
server's schedule), ``torch.cuda.mem_get_info`` (the free memory given per call) and the
CUDA-graph capture flag (off).

stdin:  {"scenarios": [{"total_bytes": T, "mem_fraction_static": f or null, "fraction": the env
         fraction, "rocm": whether the process runs on ROCm (is_hip; optional, false),
         "calls": [{"rows": M, "cols": N, "free_bytes": F}, ...]}, ...]}
stdout: {"results": [[{"need_chunk": bool, "budget": bytes (0: not read),
                       "chunks": [[row_start, row_end], ...], "readings": n}, ...], ...]}
Each scenario is one process's life: a fresh Indexer class, so a fresh budget cache.
"""
import ast
import importlib.util
import json
import os
import sys
import types

import torch

UTILS = "sglang/srt/layers/attention/mqa_logits_utils.py"
INDEXER = "sglang/srt/layers/attention/dsa/dsa_indexer.py"


class Device:
    """What the stubs answer: the GPU's total memory, the schedule, free memory now."""

    total_bytes = 0
    mem_fraction_static = None
    free_bytes = 0
    readings = 0

    @classmethod
    def mem_get_info(cls, device=None):
        cls.readings += 1
        return cls.free_bytes, cls.total_bytes


def _module(name, path=None, package=False):
    if path is None:
        module = types.ModuleType(name)
    else:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
    if package:
        module.__path__ = []
    sys.modules[name] = module
    if path is not None:
        spec.loader.exec_module(module)
    return module


def stub_eager_forward(*packages) -> None:
    """The model-executor modules the DeepSeek-V4 metadata imports, as an eager forward sees them:
    no breakable or piecewise CUDA graph, no capture; ``packages`` are more empty packages."""
    for name in ("sglang.srt.model_executor", "sglang.srt.model_executor.runner_backend_utils",
                 "sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph",
                 "sglang.srt.model_executor.runner_utils", "sglang.srt.layers.attention.dsv4", *packages):
        _module(name, package=True)
    _module("sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context"
            ).is_in_breakable_cuda_graph = lambda: False
    _module("sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph"
            ).is_in_tc_piecewise_cuda_graph = lambda: False
    _module("sglang.srt.model_executor.runner_utils.capture_mode").get_is_capture_mode = lambda: False


def _lift(path, names, namespace, cls=None):
    """Define the named functions of ``path`` (a class's methods with ``cls``) in ``namespace``."""
    tree = ast.parse(open(path).read(), filename=path)
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body if cls else tree.body
    for name in names:
        fn = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
        fn.decorator_list = []
        exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), namespace)
    return body


def load(src):
    """(the mqa_logits_utils module, budget method's class, the chunk-walk code) from the release's files."""
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention"):
        _module(name, package=True)
    if not os.path.exists(os.path.join(src, UTILS)):
        return _load_indexer_rules(src)
    _module("sglang.srt.environ", os.path.join(src, "sglang/srt/environ.py"))  # stdlib only
    utils = _module("sglang.srt.utils", package=True)
    common = _module("sglang.srt.utils.common")
    namespace = {"torch": torch}
    _lift(os.path.join(src, "sglang/srt/utils/common.py"), ("is_hip", "is_xpu", "ceil_div"), namespace)
    for name in ("is_hip", "is_xpu", "ceil_div"):
        setattr(utils, name, namespace[name])
        setattr(common, name, namespace[name])
    device_module = types.SimpleNamespace(
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=Device.total_bytes))
    utils.get_device_module = lambda: device_module
    context = _module("sglang.srt.runtime_context")
    context.get_schedule = lambda: types.SimpleNamespace(mem_fraction_static=Device.mem_fraction_static)
    torch.cuda.mem_get_info = Device.mem_get_info
    m = _module("sglang.srt.layers.attention.mqa_logits_utils", os.path.join(src, UTILS))

    path = os.path.join(src, INDEXER)
    namespace = {"mqa_logits_budget_bytes": m.mqa_logits_budget_bytes,
                 "mqa_logits_static_budget_bytes": m.mqa_logits_static_budget_bytes,
                 "get_is_capture_mode": lambda: False}
    body = _lift(path, ("_get_mqa_logits_budget_bytes",), namespace, cls="Indexer")
    assert any(isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "_mqa_logits_budget_bytes"
               for n in body), "Indexer._mqa_logits_budget_bytes is no longer a class attribute"

    def new_process():
        """The Indexer class as a new process sees it: its class-level budget cache empty."""
        return type("Indexer", (), {
            "_get_mqa_logits_budget_bytes": namespace["_get_mqa_logits_budget_bytes"],
            "_mqa_logits_budget_bytes": {},
            "_MQA_LOGITS_BYTES_PER_ELEM": m.MQA_LOGITS_BYTES_PER_ELEM,
        })
    return m, new_process, _chunk_walk(path)


class IndexerRules:
    """Before 0.5.21 the platform the Indexer's own chunk test asks: the module global ``_is_hip``."""

    def __init__(self, namespace):
        self.namespace = namespace

    @property
    def is_hip(self):
        return self.namespace["_is_hip"]

    @is_hip.setter
    def is_hip(self, answer):
        self.namespace["_is_hip"] = answer()


def _load_indexer_rules(src):
    """(rules, budget method's class, the chunk-walk code) where the rules live in the Indexer."""
    for name in ("sglang.srt.debug_utils", "sglang.srt.debug_utils.cuda_coredump"):
        _module(name, package=True)
    environ = _module("sglang.srt.environ", os.path.join(src, "sglang/srt/environ.py"))
    torch.cuda.get_device_properties = lambda index: types.SimpleNamespace(total_memory=Device.total_bytes)
    torch.cuda.mem_get_info = Device.mem_get_info
    path = os.path.join(src, INDEXER)
    namespace = {"torch": torch, "envs": environ.envs, "Tuple": tuple, "_is_hip": False,
                 "get_is_capture_mode": lambda: False,
                 "get_schedule": lambda: types.SimpleNamespace(mem_fraction_static=Device.mem_fraction_static)}
    namespace["get_global_server_args"] = namespace["get_server_args"] = namespace["get_schedule"]
    methods = ("_mqa_logits_free_mem_fraction", "_get_mqa_logits_budget_bytes", "_should_chunk_mqa_logits")
    body = _lift(path, methods, namespace, cls="Indexer")
    constants = {n.targets[0].id: eval(ast.unparse(n.value)) for n in body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "").startswith("_MQA_LOGITS_")}
    rules = IndexerRules(namespace)

    def new_process():
        cls = type("Indexer", (), {**constants, **{name: namespace[name] for name in methods},
                                   "_mqa_logits_budget_bytes": {}})
        cls._mqa_logits_free_mem_fraction = staticmethod(namespace["_mqa_logits_free_mem_fraction"])
        return cls
    return rules, new_process, _chunk_walk(path)


def _chunk_walk(path):
    """The statements of ``_get_topk_ragged`` that size the chunks (bytes_per_row, max_rows)
    and walk them (``start = 0``; ``while start < q_offset``: ``end = ...`` ... ``start = end``),
    compiled with each chunk recorded instead of the kernels in between."""
    tree = ast.parse(open(path).read(), filename=path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Indexer")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_get_topk_ragged")
    sizing = [n for n in fn.body if isinstance(n, ast.Assign) and len(n.targets) == 1
              and getattr(n.targets[0], "id", "") in ("bytes_per_row", "max_rows")]
    start = next(n for n in fn.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "start")
    loop = next(n for n in fn.body if isinstance(n, ast.While))
    first, last = loop.body[0], loop.body[-1]
    assert ast.unparse(first) == "end = min(start + max_rows, q_offset)", ast.unparse(first)
    assert ast.unparse(last) == "start = end", ast.unparse(last)
    record = ast.parse("chunks.append([start, end])").body[0]
    walk = ast.While(test=loop.test, body=[first, record, last], orelse=[])
    module = ast.fix_missing_locations(ast.Module(body=sizing + [start, walk], type_ignores=[]))
    return compile(module, path, "exec")


def run_process(utils, indexer_cls, walk, scenario) -> list[dict]:
    os.environ["SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION"] = repr(scenario["fraction"])
    rocm = scenario.get("rocm", False)
    utils.is_hip = lambda: rocm  # the process's platform, as mqa_logits_budget_bytes asks it
    Device.total_bytes = scenario["total_bytes"]
    Device.mem_fraction_static = scenario["mem_fraction_static"]
    Device.readings = 0
    indexer = indexer_cls()
    results = []
    for call in scenario["calls"]:
        Device.free_bytes = call["free_bytes"]
        rows, cols = call["rows"], call["cols"]
        if hasattr(indexer, "_should_chunk_mqa_logits"):  # before 0.5.21: the Indexer's own test
            need, budget = indexer._should_chunk_mqa_logits(rows, cols, 0)
        else:
            need, budget = utils.mqa_logits_should_chunk(num_rows=rows, num_cols=cols, rocm=rocm,
                                        get_budget_bytes=lambda: indexer._get_mqa_logits_budget_bytes(0))
        chunks = [[0, rows]]
        if need:
            scope = {"self": indexer, "k_offset": cols, "q_offset": rows,
                     "logits_budget_bytes": budget, "chunks": []}
            exec(walk, scope)
            chunks = scope["chunks"]
        results.append({"need_chunk": need, "budget": budget, "chunks": chunks, "readings": Device.readings})
    return results


def main():
    utils, new_process, walk = load(sys.argv[1])
    request = json.load(sys.stdin)
    json.dump({"results": [run_process(utils, new_process(), walk, s) for s in request["scenarios"]]},
              sys.stdout)


if __name__ == "__main__":
    main()
