"""Run SGLang's own decode-path sizing code on a CPU: the paged logits a decode step holds, the
static page table's width, and the largest decode batch its CUDA graph captures.

``python sglang_decode.py SRC`` where SRC is an unpacked sglang wheel (0.5.20 or later, with
``kernels/ops/attention/dsa/paged_mqa_logits.py``; scripts/install_engines.sh makes one).  What
runs is the release's code: ``paged_mqa_logits.py`` as a module (deepgemm_paged_mqa_logits_split),
and, lifted with ``ast`` because their modules import GPU kernels or the server's runtime,
``_chunked_fp8_paged_mqa_logits`` (nested in the DSA indexer's ``_get_topk_paged``), the DSA
backend's ``_transform_table_1_to_real``, ``mem_cache/allocation_sizing.py``'s request-to-token
headroom and ``arg_groups/memory_hook.py``'s ``handle_gpu_memory_settings``.  Stubbed: DeepGEMM's
paged kernel, which allocates ``torch.empty(rows, align(max_len, 256))[:, :max_len]`` fp32 (its
rule, as paged_mqa_logits.py:13-15 states it), on ``meta`` tensors whose live bytes a dispatch
mode follows; the server's settings (spec decoding as an EAGLE/MTP chain, topk 1) and the GPU's
memory.

stdin:  {"paged": [{"rows": R, "width": page-table tokens, "sm_count": S}, ...],
         "headroom": [drafts, ...],
         "tiers": [{"gpu_mib": M, "tp": T, "max_running_requests": N or null}, ...]}
stdout: {"paged": [{"peak": live-bytes peak of the call, "max_seq_len": columns}, ...],
         "headroom": [tokens, ...], "tiers": [max_bs, ...]}
"""
import ast
import copy
import importlib.util
import json
import os
import sys
import types
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

INDEXER = "sglang/srt/layers/attention/dsa/dsa_indexer.py"
BACKEND = "sglang/srt/layers/attention/dsa_backend.py"
PAGED = "sglang/kernels/ops/attention/dsa/paged_mqa_logits.py"
SIZING = "sglang/srt/mem_cache/allocation_sizing.py"
MEMORY_HOOK = "sglang/srt/arg_groups/memory_hook.py"


class Live(TorchDispatchMode):
    """Live bytes of meta storages and their peak."""

    def __init__(self):
        super().__init__()
        self.live, self.current, self.peak = {}, 0, 0

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        given = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)}
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == "meta":
                key = t.untyped_storage()._cdata
                if key not in given and key not in self.live:
                    self.live[key] = t.untyped_storage().nbytes()
                    self.current += self.live[key]
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(t.untyped_storage(), self._free, key)
        return out

    def _free(self, key):
        self.current -= self.live.pop(key)


def fake_paged_logits(q, kv, w, context_lens, block_table, schedule, max_len, clean_logits=False):
    """DeepGEMM's fp8_paged_mqa_logits as it allocates: [batch x next_n, align(max_len, 256)] fp32."""
    rows = q.shape[0] * q.shape[1]
    return torch.empty(rows, -(-max_len // 256) * 256, dtype=torch.float32, device="meta")[:, :max_len]


def _module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function(body, name):
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            node.decorator_list = []
            return node
    raise LookupError(name)


def _lift(path, name, namespace, cls_method=None):
    """Define ``name`` from ``path`` in ``namespace`` (found anywhere, inside ``cls_method`` where
    given: a nested function)."""
    tree = ast.parse(open(path).read(), filename=path)
    body = tree.body if cls_method is None else _function(tree.body, cls_method).body
    exec(compile(ast.Module(body=[_function(body, name)], type_ignores=[]), path, "exec"), namespace)
    return namespace[name]


def paged(src, cases):
    """Each decode call's live-bytes peak and columns through the release's own split path."""
    ops = _module("sglang_paged_mqa_logits", os.path.join(src, PAGED))
    out = []
    for case in cases:
        rows, width = case["rows"], case["width"]
        backend = types.SimpleNamespace(physical_page_size=64, real_page_size=64)  # 0.5.20-0.5.21: real_page_size
        real = _lift(os.path.join(src, BACKEND), "_transform_table_1_to_real", {"torch": torch})
        table = real(backend, torch.zeros(1, width, dtype=torch.int32)).expand(rows, -1)
        max_seq_len = table.shape[1] * 64  # dsa_indexer.py: block_tables.shape[1] * page_size
        ns = {"torch": torch, "self": types.SimpleNamespace(sm_count=case["sm_count"]), "blocksize": 64,
              "resolve_fp8_paged_mqa_logits_fn": lambda: fake_paged_logits,
              "resolve_paged_mqa_logits_metadata_fn": lambda: (lambda *a: None),
              # 0.5.20-0.5.21 call DeepGEMM by name
              "deep_gemm": types.SimpleNamespace(fp8_paged_mqa_logits=fake_paged_logits,
                                                 get_paged_mqa_logits_metadata=lambda *a: None)}
        chunked = _lift(os.path.join(src, INDEXER), "_chunked_fp8_paged_mqa_logits", ns, "_get_topk_paged")
        q = torch.empty(rows, 32, 128, dtype=torch.float8_e4m3fn, device="meta")
        weights = torch.empty(rows, 32, device="meta")
        lens = torch.empty(rows, 1, dtype=torch.int32, device="meta")
        with Live() as live:
            logits = ops.deepgemm_paged_mqa_logits_split(chunked, q, None, weights, lens, table, None, max_seq_len,
                                                         q_offset=rows)
            del logits
        out.append({"peak": live.peak, "max_seq_len": max_seq_len})
    return out


def headroom(src, drafts_list):
    """get_req_to_token_extra_context_len with spec decoding as an MTP/EAGLE chain of ``drafts``."""
    out = []
    for drafts in drafts_list:
        spec = types.SimpleNamespace(speculative_algorithm="EAGLE" if drafts else None,
                                     speculative_num_steps=drafts or None, speculative_eagle_topk=1 if drafts else None)
        algo = types.SimpleNamespace(is_uno=lambda: False, has_draft_kv=lambda: True)
        spec_info = types.ModuleType("sglang.srt.speculative.spec_info")
        spec_info.SpeculativeAlgorithm = types.SimpleNamespace(from_string=lambda name: algo)
        for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules["sglang.srt.speculative.spec_info"] = spec_info
        ns = {"get_spec": lambda: spec, "max_speculative_num_draft_tokens": lambda: drafts + 1 if drafts else None,
              "get_schedule": lambda: types.SimpleNamespace(page_size=64),
              "get_parallel": lambda: types.SimpleNamespace(attn_dcp_size=1)}
        path = os.path.join(src, SIZING)
        for name in ("get_alloc_page_size", "get_alloc_len_per_decode", "get_alloc_reserve_per_decode"):
            _lift(path, name, ns)
        out.append(_lift(path, "get_req_to_token_extra_context_len", ns)())
    return out


class Cfg(types.SimpleNamespace):
    def __getattr__(self, name):  # a server argument the hook reads and the case leaves unset
        return None


def tiers(src, cases):
    """The largest captured decode batch handle_gpu_memory_settings resolves (before the request
    pool's clamp)."""
    out = []
    for case in cases:
        declared = {}
        hook = types.ModuleType("sglang.srt.arg_groups.cuda_graph_hook")
        hook.generate_decode_cuda_graph_batch_sizes = lambda args, max_bs: [max_bs]
        hook.generate_prefill_cuda_graph_batch_sizes = lambda max_bs: [max_bs]
        hook.generate_cpu_graph_batch_sizes = lambda args: []
        qwen = types.ModuleType("sglang.srt.arg_groups.model_overrides.qwen3_vl")
        qwen.expand_multimodal_decode_graph_to_running_limit = lambda *a: None
        for name in ("sglang", "sglang.srt", "sglang.srt.arg_groups", "sglang.srt.arg_groups.model_overrides"):
            sys.modules.setdefault(name, types.ModuleType(name))
        sys.modules[hook.__name__], sys.modules[qwen.__name__] = hook, qwen
        graph = types.SimpleNamespace(decode=types.SimpleNamespace(backend="full", max_bs=None, bs=None),
                                      prefill=types.SimpleNamespace(backend="breakable", max_bs=None, bs=None))
        cfg = Cfg(device="cuda", cuda_graph_config=graph, tp_size=case["tp"], pp_size=1, chunked_prefill_size=None,
                  max_running_requests=case["max_running_requests"], mem_fraction_static=0.9, model_path="glm-5",
                  _cuda_graph_config_locked=set())

        def declare(args, who, **values):
            declared.update(values)
            for key, value in values.items():
                setattr(cfg, key, value)
        ns = {"Any": object, "copy": copy, "resolving_view": lambda args: cfg, "declare_resolution": declare,
              "get_device_memory_capacity": lambda device: case["gpu_mib"], "use_mla_backend": lambda args: True,
              "Backend": types.SimpleNamespace(BREAKABLE="breakable", DISABLED="disabled"),
              "_DEFAULT_PP_PREFILL_CUDA_GRAPH_MAX_TOKENS": 8192, "logger": types.SimpleNamespace(warning=print)}
        _lift(os.path.join(src, MEMORY_HOOK), "handle_gpu_memory_settings", ns)(cfg)
        out.append(declared.get("cuda_graph_config", graph).decode.max_bs)
    return out


def main():
    src = sys.argv[1]
    request = json.load(sys.stdin)
    json.dump({"paged": paged(src, request.get("paged", [])), "headroom": headroom(src, request.get("headroom", [])),
               "tiers": tiers(src, request.get("tiers", []))}, sys.stdout)


if __name__ == "__main__":
    main()
