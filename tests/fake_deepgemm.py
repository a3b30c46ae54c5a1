"""Fake ``deep_gemm`` modules with the API shapes of the real builds, for CPU tests.

Each fake computes the real logits formula on the CPU, allocates the output with
the padding of a given ``indexer_lib.padding`` rule (rows and row stride), writes
garbage (+inf, NaN, large values) outside each row's window the way the kernel
leaves it uncleaned, and records every call.
"""
from __future__ import annotations

import sys
import types

import torch

from indexer_lib.padding import get_rules


def exact_logits(q, k, k_scale, weights):
    """[M, N] float64: k_scale[j] * sum_h weights[i, h] * relu(q[i, h] . k[j])."""
    qd = q.to(torch.float64)
    kd = k.to(torch.float64)
    dots = torch.einsum("mhd,nd->mhn", qd, kd).clamp_min(0)
    return torch.einsum("mhn,mh->mn", dots, weights.to(torch.float64)) * k_scale.to(torch.float64)[None, :]


def _padded_output(m, width, heads, rules, compressed):
    rows = rules.rows_allocated(m, heads)
    stride = rules.row_stride(width, compressed)
    buf = torch.empty(rows, stride, dtype=torch.float32)
    # garbage everywhere: what the kernel leaves outside the windows
    pattern = torch.tensor([float("nan"), float("inf"), 3.0e38, -1.0e30])
    buf.copy_(pattern.repeat(rows * stride // 4 + 1)[: rows * stride].view(rows, stride))
    return buf[:m, :width]


def _compute(calls, rules, api, q, kv, weights, ks, ke, clean_logits, max_seqlen_k):
    k, k_scale = kv
    m, heads, _ = q.shape
    n = k.shape[0]
    compressed = max_seqlen_k > 0
    width = max_seqlen_k if compressed else n
    out = _padded_output(m, width, heads, rules, compressed)
    full = exact_logits(q, k, k_scale, weights).to(torch.float32)
    for i in range(m):
        a, b = int(ks[i]), int(ke[i])
        if compressed:
            out[i, : b - a] = full[i, a:b]
        else:
            out[i, a:b] = full[i, a:b]
            if clean_logits:
                out[i, :a] = -float("inf")
                out[i, b:] = -float("inf")
    calls.append({"api": api, "m": m, "n": n, "clean_logits": clean_logits,
                  "max_seqlen_k": max_seqlen_k, "k_ptr": k.data_ptr(), "k_scale_ptr": k_scale.data_ptr()})
    return out


def make_fake(api: str, rules_version: str, version: str | None = None, pybind: bool = False):
    """A module object named ``deep_gemm`` with the given API shape.

    api: ``legacy`` (2.1: clean_logits, no max_seqlen_k), ``legacy+compressed``
    (2.2 - 2.7 / sgl-deep-gemm), ``fp8_fp4`` (both functions, 2.4.2+),
    ``fp8_fp4-compressed`` (2.8: fp8_fp4_mqa_logits(..., max_seqlen_k) only),
    ``gemm-only`` (PyPI deep-gemm 1.0.0).  ``pybind``: functions whose Python
    signature cannot be read (only a docstring), like pybind11 builtins.
    """
    rules = get_rules(rules_version)
    mod = types.ModuleType("deep_gemm")
    mod.__file__ = f"<fake deep_gemm {api}>"
    if version is not None:
        mod.__version__ = version
    mod.calls = []

    def wrap(fn, doc):
        if not pybind:
            return fn

        class Builtin:
            __doc__ = doc

            @property
            def __signature__(self):
                raise ValueError("no signature found for builtin")

            def __call__(self, *args, **kwargs):
                return fn(*args, **kwargs)

        return Builtin()

    if api == "legacy":
        def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True):
            return _compute(mod.calls, rules, "fp8_mqa_logits", q, kv, weights,
                            cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, 0)
        mod.fp8_mqa_logits = wrap(fp8_mqa_logits, "fp8_mqa_logits(q: torch.Tensor, kv: tuple[torch.Tensor, "
                                  "torch.Tensor], weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor, "
                                  "cu_seq_len_k_end: torch.Tensor, clean_logits: bool = True) -> torch.Tensor\n")
    if api in ("legacy+compressed", "fp8_fp4"):
        def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False,
                           max_seqlen_k=0):
            return _compute(mod.calls, rules, "fp8_mqa_logits", q, kv, weights,
                            cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k)
        mod.fp8_mqa_logits = wrap(fp8_mqa_logits, "fp8_mqa_logits(q: torch.Tensor, kv: tuple[torch.Tensor, "
                                  "torch.Tensor], weights: torch.Tensor, cu_seq_len_k_start: torch.Tensor, "
                                  "cu_seq_len_k_end: torch.Tensor, clean_logits: bool = False, "
                                  "max_seqlen_k: int = 0) -> torch.Tensor\n")
    if api == "fp8_fp4":
        def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False,
                               max_seqlen_k=0, logits_dtype=torch.float):
            q_fp, q_sf = q
            assert q_sf is None, "fp8 q takes no scale"
            return _compute(mod.calls, rules, "fp8_fp4_mqa_logits", q_fp, kv, weights,
                            cu_seq_len_k_start, cu_seq_len_k_end, clean_logits, max_seqlen_k)
        mod.fp8_fp4_mqa_logits = wrap(fp8_fp4_mqa_logits, "fp8_fp4_mqa_logits(q: tuple[torch.Tensor, "
                                      "Optional[torch.Tensor]], kv: tuple[torch.Tensor, torch.Tensor], weights: "
                                      "torch.Tensor, cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: "
                                      "torch.Tensor, clean_logits: bool = False, max_seqlen_k: int = 0, "
                                      "logits_dtype: torch.dtype = torch.float32) -> torch.Tensor\n")
    if api == "fp8_fp4-compressed":
        def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k,
                               schedule_meta=None):
            q_fp, q_sf = q
            assert q_sf is None, "fp8 q takes no scale"
            assert max_seqlen_k > 0, "DeepGEMM 2.8: compressed logits only"
            return _compute(mod.calls, rules, "fp8_fp4_mqa_logits", q_fp, kv, weights,
                            cu_seq_len_k_start, cu_seq_len_k_end, False, max_seqlen_k)
        mod.fp8_fp4_mqa_logits = wrap(fp8_fp4_mqa_logits, "fp8_fp4_mqa_logits(q: tuple[torch.Tensor, "
                                      "Optional[torch.Tensor]], kv: tuple[torch.Tensor, torch.Tensor], weights: "
                                      "torch.Tensor, cu_seq_len_k_start: torch.Tensor, cu_seq_len_k_end: "
                                      "torch.Tensor, max_seqlen_k: int, schedule_meta: Optional[torch.Tensor] "
                                      "= None) -> torch.Tensor\n")
    if api == "gemm-only":
        mod.fp8_gemm_nt = lambda *a, **k: None
    return mod


def install(monkeypatch, module, name="deep_gemm"):
    """Put ``module`` in sys.modules as ``name`` (and hide vLLM's copy)."""
    monkeypatch.setitem(sys.modules, name, module)
    if name != "vllm.third_party.deep_gemm":
        monkeypatch.setitem(sys.modules, "vllm.third_party.deep_gemm", None)
    return module
