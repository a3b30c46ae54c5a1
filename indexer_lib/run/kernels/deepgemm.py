"""The ``deepgemm`` backend: DeepGEMM's fp8 MQA-logits kernel, whichever build is installed.

What it adapts to (docs/design.md#deepgemms-padding, checked against the sgl-deep-gemm 0.1.4.post1 wheel):

=====================  ==================================================================  =========
API shape              call                                                                layouts
=====================  ==================================================================  =========
``legacy``             ``fp8_mqa_logits(q, (k, s), w, ks, ke, clean_logits)`` (2.1)        full
``legacy+compressed``  ``fp8_mqa_logits(q, (k, s), w, ks, ke, clean_logits, max_seqlen_k)``  full, compressed
                       (2.2 - 2.7; sgl-deep-gemm's Python wrapper)
``fp8_fp4``            ``fp8_fp4_mqa_logits((q, None), (k, s), w, ks, ke, clean_logits,     full, compressed
                       max_seqlen_k)`` (2.4.2 - 2.7)
``fp8_fp4-compressed``  ``fp8_fp4_mqa_logits((q, None), (k, s), w, ks, ke, max_seqlen_k)``   compressed
                       (2.8: compressed output only, no ``clean_logits``)
=====================  ==================================================================  =========

``clean_logits`` is always False: top-k masks each row's window itself
(``topk.window_topk``), as the serving engines do.

The version found decides the padding rules (``indexer_lib.padding`` rule names)
that the memory model and the planners use (``deepgemm_version``).  It is read,
in this order, from: the ``INDEXER_LAB_DEEPGEMM_RULES`` environment variable; a
table of builds whose padding was read off their binaries (``KNOWN_BUILDS``); an
upstream ``2.x.y`` version number; the API shape (a guess, said so in
``info.rules_source``).  ``probe_padding`` checks the rules on a GPU from the
strides DeepGEMM really allocates.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from dataclasses import asdict, dataclass

import torch

from ...padding import DEEPGEMM_RULES, PaddingRules, get_rules
from ...plan import Chunk, Plan
from .base import Backend
from .checks import arch_major_of, check_mqa_logits_inputs
from .topk import DEFAULT_BLOCK_BYTES, window_topk

# where a DeepGEMM may live, tried in order
CANDIDATE_MODULES = ("deep_gemm", "vllm.third_party.deep_gemm")
RULES_ENV = "INDEXER_LAB_DEEPGEMM_RULES"

# (distribution, version) -> padding rule name, read off the build's binary.
# sgl-deep-gemm 0.1.4.post1: disassembly of deep_gemm::attention::fp8_fp4_mqa_logits in
# its _C.so: rows align(M, 128 / H); row stride align(N + 256, 1024 / 4) fp32 elements;
# compressed align(align(max_seqlen_k, 256), 1024 / 4): the 2.6 rules.
KNOWN_BUILDS: dict[tuple[str, str], str] = {
    ("sgl-deep-gemm", "0.1.4.post1"): "2.6",
}

API_LEGACY = "legacy"
API_LEGACY_COMPRESSED = "legacy+compressed"
API_FP8_FP4 = "fp8_fp4"
API_FP8_FP4_COMPRESSED_ONLY = "fp8_fp4-compressed"


class DeepGemmUnavailable(ImportError, ValueError):
    """No usable DeepGEMM is installed (the message says what was tried)."""


@dataclass(frozen=True)
class DeepGemmInfo:
    """What was found and how it will be called; goes into every result's provenance."""

    module: str  # import name, e.g. "deep_gemm" or "vllm.third_party.deep_gemm"
    path: str  # the module's file
    distribution: str | None  # pip distribution that ships it, e.g. "sgl-deep-gemm"
    version: str  # the version that distribution or module reports
    rules_version: str  # padding rule name in indexer_lib.padding
    rules_source: str  # env, known build, upstream version, api shape (guess)
    api: str  # one of the API_* names
    full_layout: bool  # logits column j = workspace column j
    compressed_layout: bool  # max_seqlen_k rows: column c of row i = KV ks[i] + c
    params: tuple[str, ...] | None = None  # argument names of the function called, if known

    def to_json(self) -> dict:
        d = asdict(self)
        d["params"] = list(self.params) if self.params is not None else None
        return d


# --------------------------------------------------------------------------- discovery

def _param_names(fn) -> tuple[str, ...] | None:
    """Argument names of a Python function, or of a pybind11 one from its docstring."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        pass
    else:
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            return None  # a generic wrapper: names unknown
        return tuple(p.name for p in params)
    doc = (getattr(fn, "__doc__", None) or "").strip()
    match = re.match(r"^[\w.]*\((.*?)\)\s*->", doc, re.S)
    if not match:
        return None
    names = []
    for part in re.split(r",\s*(?![^\[\(]*[\]\)])", match.group(1)):
        name = part.split(":")[0].split("=")[0].strip()
        if name and name not in ("self", "*", "/"):
            names.append(name)
    return tuple(names)


def _distribution_of(module) -> tuple[str | None, str | None]:
    """The installed distribution that ships ``module``'s top-level package, and its version."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover
        return None, None
    top = module.__name__.split(".")[0]
    try:
        names = metadata.packages_distributions().get(top, [])
    except Exception:
        names = []
    for name in names:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def _upstream_rules(version: str) -> tuple[str | None, str]:
    """Rule name for an upstream DeepGEMM version number ``2.x.y``."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not m:
        return None, ""
    major, minor, patch = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if major != 2:
        if major > 2:
            return "2.8", "upstream version (newer than known: 2.8 rules assumed)"
        return None, ""
    if minor <= 1:
        return "2.1", "upstream version"
    if minor in (2, 3):
        return f"2.{minor}", "upstream version"
    if minor == 4:
        if patch >= 2:
            return "2.4.2", "upstream version"
        return "2.3", "upstream version (2.4.0/2.4.1: 2.3 rules assumed, unverified)"
    if minor == 5:
        return "2.5.0", "upstream version (2.5 builds before June 2026 pad to 8: probe to tell)"
    if minor in (6, 7, 8):
        return f"2.{minor}", "upstream version"
    return "2.8", "upstream version (newer than known: 2.8 rules assumed)"


def _api_of(module, rules_version: str | None) -> tuple[str, object, tuple[str, ...] | None]:
    """Which function to call and in which shape."""
    fp4 = getattr(module, "fp8_fp4_mqa_logits", None)
    legacy = getattr(module, "fp8_mqa_logits", None)
    if fp4 is None and legacy is None:
        raise DeepGemmUnavailable(
            f"{module.__name__} has neither fp8_mqa_logits nor fp8_fp4_mqa_logits: it is a GEMM-only "
            "build (PyPI deep-gemm 1.0.0 is one); install the h200 extra (sgl-deep-gemm)")
    if fp4 is not None:
        params = _param_names(fp4)
        if params is not None:
            compressed_only = "clean_logits" not in params
        else:
            compressed_only = rules_version is not None and not get_rules(rules_version).full_width
        return (API_FP8_FP4_COMPRESSED_ONLY if compressed_only else API_FP8_FP4), fp4, params
    params = _param_names(legacy)
    if params is not None:
        has_compressed = "max_seqlen_k" in params
    else:
        has_compressed = rules_version is not None and get_rules(rules_version).has_compressed
    return (API_LEGACY_COMPRESSED if has_compressed else API_LEGACY), legacy, params


def _guess_rules_from_api(api: str) -> str:
    return {
        API_LEGACY: "2.1",
        API_LEGACY_COMPRESSED: "2.3",
        API_FP8_FP4: "2.6",
        API_FP8_FP4_COMPRESSED_ONLY: "2.8",
    }[api]


def import_deepgemm(candidates=CANDIDATE_MODULES):
    """Import the first DeepGEMM that has the MQA-logits kernels; ``DeepGemmUnavailable`` if none."""
    errors = []
    for name in candidates:
        try:
            module = importlib.import_module(name)
        except Exception as e:  # a broken build raises more than ImportError (OSError from _C.so)
            errors.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if getattr(module, "fp8_mqa_logits", None) is None and \
                getattr(module, "fp8_fp4_mqa_logits", None) is None:
            errors.append(f"{name}: no fp8_mqa_logits / fp8_fp4_mqa_logits (GEMM-only build)")
            continue
        return module
    raise DeepGemmUnavailable(
        "no DeepGEMM with the MQA-logits kernels could be imported (" + "; ".join(errors) +
        "): on an H200 install the h200 extra, see the README")


def describe(module) -> DeepGemmInfo:
    """Version, padding rules and API shape of an imported DeepGEMM module."""
    dist, dist_version = _distribution_of(module)
    mod_version = str(getattr(module, "__version__", "") or "")
    version = dist_version or mod_version or "unknown"

    rules_version, source = None, ""
    override = os.environ.get(RULES_ENV, "").strip()
    if override:
        get_rules(override)  # a clear ValueError for an unknown name
        rules_version, source = override, f"environment {RULES_ENV}"
    if rules_version is None and dist is not None:
        known = KNOWN_BUILDS.get((dist, dist_version))
        if known:
            rules_version, source = known, f"known build {dist} {dist_version}"
    if rules_version is None:
        # the module's own number first (vLLM's vendored copy carries upstream's)
        for candidate in (mod_version, dist_version if dist in ("deep-gemm", "deep_gemm") else ""):
            rules_version, source = _upstream_rules(candidate or "")
            if rules_version:
                break
    api, _, params = _api_of(module, rules_version)
    if rules_version is None:
        rules_version, source = _guess_rules_from_api(api), f"api shape {api} (guess: probe to confirm)"
    rules = get_rules(rules_version)
    full = api in (API_LEGACY, API_LEGACY_COMPRESSED, API_FP8_FP4) and rules.full_width
    compressed = api != API_LEGACY and rules.has_compressed
    return DeepGemmInfo(
        module=module.__name__,
        path=str(getattr(module, "__file__", "") or ""),
        distribution=dist,
        version=version,
        rules_version=rules_version,
        rules_source=source,
        api=api,
        full_layout=full,
        compressed_layout=compressed,
        params=params,
    )


# --------------------------------------------------------------------------- padding probe

def rules_matching(row_stride: int, rows_allocated: int, rows: int, cols: int, heads: int,
                   compressed: bool = False) -> list[str]:
    """Rule names whose padding gives this row stride and row count for an [rows, cols] call."""
    found = []
    for name, rules in DEEPGEMM_RULES.items():
        if compressed and not rules.has_compressed:
            continue
        if not compressed and not rules.full_width:
            continue
        if rules.row_stride(cols, compressed) == row_stride and \
                rules.rows_allocated(rows, heads) == rows_allocated:
            found.append(name)
    return found


def allocation_of(logits: torch.Tensor) -> tuple[int, int]:
    """(row stride in elements, rows allocated) of a logits view DeepGEMM returned."""
    stride = logits.stride(0)
    nbytes = logits.untyped_storage().nbytes() - logits.storage_offset() * logits.element_size()
    return stride, nbytes // (stride * logits.element_size())


# --------------------------------------------------------------------------- backend

@dataclass
class CallRecord:
    """What the last logits call did (for tests and the device script)."""

    api: str
    compressed: bool
    width: int
    kv_len: int
    row_stride: int
    rows_allocated: int
    kv_start: int = 0  # first workspace column of a column range
    k_ptr: int = 0  # address of the k passed to DeepGEMM


class DeepGemmBackend(Backend):
    """Logits from DeepGEMM, top-k by ``window_topk`` (torch.topk + exact tie repair)."""

    name = "deepgemm"
    supports_column_range = True
    supports_alloc_rows = True

    def __init__(self, module=None, check_inputs: bool = True, check_values: bool = True,
                 topk_block_bytes: int = DEFAULT_BLOCK_BYTES):
        self.module = module if module is not None else import_deepgemm()
        self.info = describe(self.module)
        self.deepgemm_version = self.info.rules_version
        self.rules: PaddingRules = get_rules(self.deepgemm_version)
        self.check_inputs = check_inputs
        self.check_values = check_values
        self.topk_block_bytes = topk_block_bytes
        _, self._fn, _ = _api_of(self.module, self.deepgemm_version)
        self.last_call: CallRecord | None = None
        self.padding_mismatches: list[dict] = []

    # what the planner and executor ask -------------------------------------------------
    @property
    def supports_full(self) -> bool:
        return self.info.full_layout

    @property
    def supports_compressed(self) -> bool:
        return self.info.compressed_layout

    @property
    def causal_compressed(self) -> bool:
        """The causal strategy's layout: compressed rows where the build has them, else a KV prefix."""
        return self.supports_compressed

    def strategy(self, name: str):
        """The strategy as this build runs it: causal in compressed rows where it has them."""
        return super().strategy(name).for_build(self.causal_compressed)

    def check_plan(self, plan) -> None:
        """ValueError if the plan asks for a layout or padding this build does not have."""
        super().check_plan(plan)
        for chunk in plan.chunks:
            self._check_layout(chunk.compressed)

    def _check_layout(self, compressed: bool) -> None:
        if compressed and not self.supports_compressed:
            raise ValueError(f"DeepGEMM {self.info.version} ({self.info.api}) has no compressed "
                             "(max_seqlen_k) layout: plan the causal strategy with compressed=False")
        if not compressed and not self.supports_full:
            raise ValueError(f"DeepGEMM {self.info.version} ({self.info.api}) has only the compressed "
                             "layout: plan with compressed=True (causal strategy)")

    # the kernel -----------------------------------------------------------------------------
    def _call(self, q, k, k_scale, weights, ks, ke, max_seqlen_k: int):
        api, fn = self.info.api, self._fn
        kv = (k, k_scale)
        if api == API_LEGACY:
            return fn(q, kv, weights, ks, ke, False)
        if api == API_LEGACY_COMPRESSED:
            return fn(q, kv, weights, ks, ke, False, max_seqlen_k)
        if api == API_FP8_FP4:
            return fn((q, None), kv, weights, ks, ke, False, max_seqlen_k)
        # compressed only: no clean_logits argument
        return fn((q, None), kv, weights, ks, ke, max_seqlen_k)

    def logits(self, q, k, k_scale, weights, ks, ke, width: int, compressed: bool = False,
               kv_start: int = 0, alloc_rows: int | None = None, **hints):
        """DeepGEMM's logits of one chunk.

        ``kv_start``: a column range (kv-split): k and k_scale are sliced from row
        ``kv_start`` (a multiple of 256 in plans, so the scale's base stays 16-byte
        aligned for TMA) and ks/ke are already the windows in the range's columns.
        ``alloc_rows``: DeepGEMM allocates its own output, so a fixed-shape chunk
        pads q, weights and ks/ke to ``alloc_rows`` rows with empty windows
        (ks = ke = 0) and returns the first ``m`` rows of the ``[alloc_rows, width]``
        allocation; the padded inputs are temporaries (``memory.padded_inputs_bytes``).
        """
        self._check_layout(compressed)
        if kv_start:
            if compressed:
                raise ValueError("kv_start: a column range needs the full layout, not the compressed one")
            if kv_start % 4:
                raise ValueError(f"kv_start {kv_start}: k_scale[{kv_start}:] would not be 16-byte aligned "
                                 "(TMA needs kv_start % 4 == 0; plans use multiples of 256)")
            k, k_scale = k[kv_start:], k_scale[kv_start:]
        m = q.shape[0]
        if alloc_rows is not None and alloc_rows < m:
            raise ValueError(f"alloc_rows {alloc_rows}: fewer than the {m} rows to compute")
        if alloc_rows is not None and alloc_rows > m:
            q, weights, ks, ke = _pad_rows(q, weights, ks, ke, alloc_rows)
        n = k.shape[0] if isinstance(k, torch.Tensor) and k.dim() >= 1 else 0
        if not compressed:
            if width > n:
                raise ValueError(f"width {width}: a full-layout logits tensor is at most N = {n} wide")
            if width < n:
                # a KV prefix: rows whose windows end by `width` only need those columns; slicing
                # from row 0 keeps the TMA alignment of k and k_scale
                k, k_scale = k[:width], k_scale[:width]
        elif width < 1:
            raise ValueError(f"width {width}: the compressed layout needs max_seqlen_k >= 1")
        msk = width if compressed else 0
        if self.check_inputs:
            check_mqa_logits_inputs(q, k, k_scale, weights, ks, ke,
                                    arch_major=arch_major_of(q.device), max_seqlen_k=msk,
                                    check_values=self.check_values)
        out = self._call(q, k, k_scale, weights, ks, ke, msk)
        rows_in = q.shape[0]
        if tuple(out.shape) != (rows_in, width):
            raise RuntimeError(f"DeepGEMM returned logits of shape {tuple(out.shape)}, "
                               f"expected {(rows_in, width)}")
        stride, rows_alloc = allocation_of(out)
        self.last_call = CallRecord(self.info.api, compressed, width, k.shape[0], stride, rows_alloc,
                                    kv_start, k.data_ptr())
        heads = q.shape[1]
        expected = (self.rules.row_stride(width, compressed), self.rules.rows_allocated(rows_in, heads))
        if (stride, rows_alloc) != expected:
            self.padding_mismatches.append({
                "rows": rows_in, "cols": width, "heads": heads, "compressed": compressed,
                "row_stride": stride, "rows_allocated": rows_alloc,
                "expected_row_stride": expected[0], "expected_rows_allocated": expected[1],
                "rules_matching": rules_matching(stride, rows_alloc, rows_in, width, heads, compressed),
            })
        return out if rows_in == m else out[:m]

    def topk(self, logits, ks, ke, k: int, compressed: bool = False, out=None, **hints):
        return window_topk(logits, ks, ke, k, compressed=compressed, block_bytes=self.topk_block_bytes,
                           out=out, host_windows=hints.get("host_windows"))

    def temporaries_bytes(self, plan: Plan, chunk: Chunk, topk: int) -> int:
        """window_topk's temporaries (an upper bound without tie repair; the logits and
        the [m, k] result, written into the executor's buffer, are counted elsewhere).

        DeepGEMM's own allocation is the padded logits tensor alone (its kernels
        keep their work in shared memory); a first call also JIT-compiles and may
        allocate once, which the device script keeps out of the measured peaks.
        """
        from ...memory import deepgemm_temporaries_bytes
        from ...presets import get_model

        return deepgemm_temporaries_bytes(chunk, get_model(plan.model), topk, self.topk_block_bytes)


def _pad_rows(q, weights, ks, ke, rows: int):
    """q, weights, ks, ke with ``rows`` rows: the extra rows zero, with empty windows."""
    m = q.shape[0]
    q_pad = torch.empty((rows, *q.shape[1:]), dtype=q.dtype, device=q.device)
    q_pad[:m].copy_(q)
    q_pad[m:].view(torch.uint8).zero_()
    w_pad = torch.zeros((rows, weights.shape[1]), dtype=weights.dtype, device=weights.device)
    w_pad[:m].copy_(weights)
    ks_pad = torch.zeros((rows,), dtype=ks.dtype, device=ks.device)
    ks_pad[:m].copy_(ks)
    ke_pad = torch.zeros((rows,), dtype=ke.dtype, device=ke.device)
    ke_pad[:m].copy_(ke)
    return q_pad, w_pad, ks_pad, ke_pad


def probe_padding(backend: DeepGemmBackend, heads: int, device="cuda") -> dict:
    """Run tiny calls and read the padding DeepGEMM really allocates (needs the GPU).

    Sizes are chosen so that the rule families differ: rows 1 (align 4 vs 128 / H),
    cols 1 (row stride 260, 264, 320 or 512 elements).
    """
    result = {"heads": heads, "expected": backend.deepgemm_version, "layouts": {}}
    d = 128
    g = torch.Generator(device="cpu").manual_seed(0)
    for compressed in (False, True):
        if compressed and not backend.supports_compressed or not compressed and not backend.supports_full:
            continue
        m, n = 1, 1
        q = torch.randn(m, heads, d, generator=g).to(device=device, dtype=torch.float8_e4m3fn)
        k = torch.randn(n, d, generator=g).to(device=device, dtype=torch.float8_e4m3fn)
        s = torch.ones(n, device=device, dtype=torch.float32)
        w = torch.randn(m, heads, generator=g).to(device)
        ks = torch.zeros(m, dtype=torch.int32, device=device)
        ke = torch.ones(m, dtype=torch.int32, device=device)
        out = backend._call(q, k, s, w, ks, ke, 1 if compressed else 0)
        stride, rows_alloc = allocation_of(out)
        matching = rules_matching(stride, rows_alloc, m, 1, heads, compressed)
        result["layouts"]["compressed" if compressed else "full"] = {
            "row_stride": stride, "rows_allocated": rows_alloc, "rules_matching": matching,
            "agrees": backend.deepgemm_version in matching,
        }
    return result


if __name__ == "__main__":  # python -m indexer_lib.run.kernels.deepgemm: what was found
    import json

    try:
        print(json.dumps(DeepGemmBackend().info.to_json(), indent=2))
    except DeepGemmUnavailable as e:
        print(e, file=sys.stderr)
        sys.exit(1)
