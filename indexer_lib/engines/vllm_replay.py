"""Replay an installed vLLM release's own indexer prefill on the meta device.

A standalone script (stdlib, torch and the installed vllm only; nothing of indexer_lib), run
with the Python of the environment that holds the release (``run.replay`` starts it):

    python vllm_replay.py < requests.jsonl > answers.jsonl

vLLM is imported once; each line of stdin is one request, answered by one line of stdout
(``run.replay.ReplayProcess`` keeps one running for a whole sweep).

What runs is the release's code, unmodified: its prefill chunker, its chunk-metadata
builder (``build_prefill_chunk_metadata``), its forward context, its workspace manager and
its ``sparse_attn_indexer``, on tensors of the real shapes and dtypes on the ``meta``
device.  Replaced for the duration of the call only, because they are CUDA or C++ kernels
a CPU does not have: DeepGEMM's ``fp8_fp4_mqa_logits`` (a meta kernel allocating what the
release's DeepGEMM build allocates, given by the request), ``top_k_per_row_prefill``,
``cp_gather_indexer_k_quant_cache`` and ``indexer_k_quant_and_cache`` (they write into
tensors they are given and allocate nothing), and the Triton kernel that fills the chunk
metadata (it writes into tensors the builder allocated).

Every storage created on the meta device from the first metadata tensor to the end of the
call is recorded (bytes, shape, dtype, the vLLM line that asked for it, when it was
allocated and freed).  The inputs (hidden states, q, k, weights, the KV cache) exist before
the indexer runs and are not counted; the top-k output buffer is counted, as the engine
reserves it next to the model.

a request: {"steps": [{"query_lens": [...], "seq_lens": [...], "max_logits_mb": (optional) int}],
        "max_logits_mb": int or null (every step's, unless it names its own),
        "model": {"index_heads": H, "head_dim": D, "topk": k, "max_model_len": L,
                  "kv_block": B, "hidden_size": S},
        "max_num_batched_tokens": T, "workspace_tokens": 40 * 163_840,
        "deepgemm": {"version": the DeepGEMM rules' name (indexer_lib.padding), "heads": H},
        "record": bool}   (no steps: the profile run alone)
its answer: {"vllm": version, "results": [{...} or {"error": text}]}, or {"vllm": version,
        "error": what stops this release} when its code cannot be driven
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import inspect
import json
import os
import sys
import time
import traceback
import types
import warnings
import weakref

LAYER = "model.layers.0.self_attn.indexer.k_cache"
HERE = os.path.abspath(__file__)


class Recorder:
    """Every storage an aten op creates on the meta device, with its life (a dispatch mode)."""

    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        recorder = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                given = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs))
                         if isinstance(t, torch.Tensor)}
                out = func(*args, **kwargs)
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.device.type == "meta":
                        recorder.track(t, given, func)
                return out

        self.mode = Mode()
        self.clock = 0  # events so far: allocation and free times are counted in events
        self.live: dict[int, int] = {}
        self.current = self.peak = 0
        self.allocations: list[dict] = []
        self.index: dict[int, dict] = {}
        self.kernel = None  # the replaced kernel running now, if any
        self.scalar_op = torch.ops.aten.scalar_tensor.default

    def reset_peak(self) -> None:
        self.peak = self.current

    def track(self, t, given, func) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.live or key in given:
            return
        if func is self.scalar_op and t.dim() == 0:
            return  # `t[:1] = 0` wraps the scalar on the CPU for a CUDA tensor (on meta, on meta)
        nbytes = storage.nbytes()
        self.clock += 1
        self.live[key] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        entry = {"bytes": nbytes, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                 "op": str(func), "by": self.kernel or _caller(), "allocated": self.clock, "freed": None}
        self.allocations.append(entry)
        self.index[key] = entry
        weakref.finalize(storage, self.free, key)

    def free(self, key: int) -> None:
        self.clock += 1
        self.current -= self.live.pop(key)
        self.index.pop(key)["freed"] = self.clock

    @contextlib.contextmanager
    def in_kernel(self, name: str):
        self.kernel = name
        try:
            yield
        finally:
            self.kernel = None


def _caller() -> str:
    """The innermost frame of vLLM's code (file:line function) that led to an allocation."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        marker = f"{os.sep}vllm{os.sep}"
        if marker in path and path != HERE:
            return f"vllm/{path.split(marker, 1)[1]}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "driver"


@contextlib.contextmanager
def _patched(*replacements):
    """(object, attribute, value) replaced for the block only."""
    missing = object()  # e.g. torch.ops._C.top_k_per_row_prefill: vllm._C is not built for a CPU
    saved = [(obj, name, getattr(obj, name, missing)) for obj, name, _ in replacements]
    try:
        for obj, name, value in replacements:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


class Engine:
    """The release's modules and the entry points this driver uses, whichever era it is:

    - the chunker: ``DeepseekV32IndexerMetadataBuilder._split_indexer_prefill_chunks``
      (0.30+), ``split_indexer_prefill_chunks`` (0.19-0.29, logits budget) or
      ``split_prefill_chunks`` (before 0.19.0: the workspace only, whole requests);
    - one chunk's metadata: ``build_prefill_chunk_metadata`` (0.20+) or the builder's own
      method ``build_one_prefill_chunk``, called on a stand-in holding the two attributes
      it reads (the device and the workspace size) because a real builder needs a whole
      ``VllmConfig``.
    """

    def __init__(self):
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        warnings.simplefilter("ignore")
        import torch
        import vllm.envs as envs
        import vllm.forward_context as forward_context
        import vllm.model_executor.layers.sparse_attn_indexer as layer
        import vllm.v1.attention.backends.mla.indexer as indexer
        import vllm.v1.worker.workspace as workspace

        self.torch, self.envs, self.forward_context = torch, envs, forward_context
        self.layer, self.indexer, self.workspace = layer, indexer, workspace
        self.version = importlib.metadata.version("vllm")
        self.builder = indexer.DeepseekV32IndexerMetadataBuilder
        self.split = getattr(self.builder, "_split_indexer_prefill_chunks", None) \
            or getattr(indexer, "split_indexer_prefill_chunks", None)
        self.split_requests = None
        if self.split is None:
            from vllm.v1.attention.backends.utils import split_prefill_chunks
            self.split_requests = split_prefill_chunks
        self.build_chunk = getattr(indexer, "build_prefill_chunk_metadata", None)
        self.build_one = getattr(self.builder, "build_one_prefill_chunk", None)
        if self.build_chunk is None and self.build_one is None:
            raise NotImplementedError(f"vllm {self.version}: neither build_prefill_chunk_metadata nor "
                                      "DeepseekV32IndexerMetadataBuilder.build_one_prefill_chunk")

    def chunk_specs(self, seq_cpu, q_cpu, workspace: int, max_logits_bytes: int):
        """(request slice, query slice) pairs, as the release's builder asks its chunker."""
        if self.split is not None:
            return list(self.split(seq_cpu, q_cpu, workspace, max_logits_bytes))
        return [(slice(a, b), slice(0, int(q_cpu[a:b].sum()))) for a, b in self.split_requests(seq_cpu, workspace)]

    def one_chunk(self, req_slice, query_slice, query_start_loc, qsl_cpu, seq_dev, seq_cpu,
                  block_table, workspace: int):
        if self.build_chunk is not None:  # 0.20+, as the builder calls it
            params = inspect.signature(self.build_chunk).parameters
            args = [req_slice.start, req_slice.stop, query_start_loc, qsl_cpu]
            if "uncompressed_seq_lens" in params:
                args += [seq_dev, seq_dev, seq_cpu, block_table, 1]  # compress ratio 1
            else:
                args += [seq_dev, seq_cpu, block_table]
            kwargs = {"query_slice": query_slice, "skip_kv_gather": query_slice.start > 0}
            return self.build_chunk(*args, **{k: v for k, v in kwargs.items() if k in params})
        stand_in = types.SimpleNamespace(device=query_start_loc.device, max_prefill_buffer_size=workspace)
        params = inspect.signature(self.build_one).parameters
        if "req_slice" in params:  # 0.19
            return self.build_one(stand_in, req_slice, query_slice, qsl_cpu, seq_cpu, block_table,
                                  skip_kv_gather=query_slice.start > 0)
        return self.build_one(stand_in, req_slice.start, req_slice.stop, qsl_cpu, seq_cpu, block_table)


def _meta_logits(torch, rec: Recorder, rule: dict):
    """DeepGEMM's fp8_fp4_mqa_logits on meta: the padded fp32 allocation of the build (``rule``:
    its version and the model's index heads; the padding rule is indexer_lib.padding's), sliced to
    [M, max_seqlen_k] (compressed layout) or [M, N] (full layout)."""
    rules = _padding().get_rules(rule["version"])

    def logits(q, kv, weights, ks, ke, max_seqlen_k=0, *args, **kwargs):
        values = q[0] if isinstance(q, tuple) else q
        keys = kv[0] if isinstance(kv, tuple) else kv
        rows = values.shape[0]
        cols = max_seqlen_k if max_seqlen_k else keys.shape[0]
        shape = (rules.rows_allocated(rows, rule["heads"]), rules.row_stride(cols, bool(max_seqlen_k)))
        with rec.in_kernel("DeepGEMM fp8_fp4_mqa_logits (meta)"):
            full = torch.empty(shape, dtype=torch.float32, device=values.device)
        return full[:rows, :cols]

    return logits


def _padding():
    """indexer_lib.padding: the one place DeepGEMM's padding rule is written (the driver runs as a
    script in the engine's environment, an overlay on the project's, from this checkout)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
    if repo not in sys.path:
        sys.path.append(repo)
    import indexer_lib.padding

    return indexer_lib.padding


class _NoAlloc:
    """A kernel that writes into tensors it is given and allocates nothing: called directly or
    launched Triton-style, ``kernel[grid](...)``."""

    def __call__(self, *args, **kwargs):
        return None

    def __getitem__(self, grid):
        return self


_no_alloc = _NoAlloc()


def _tensor(torch, values, device="cpu"):
    return torch.tensor(values, dtype=torch.int32, device=device)


def build_metadata(eng: Engine, query_lens, seq_lens, max_logits_bytes: int, workspace: int,
                   block: int, head_dim: int, rec: Recorder):
    """The release's own prefill metadata for one all-prefill step, as its builder makes it."""
    torch, ix = eng.torch, eng.indexer
    seq_cpu, q_cpu = _tensor(torch, seq_lens), _tensor(torch, query_lens)
    qsl_cpu = _tensor(torch, [0] + [sum(query_lens[:i + 1]) for i in range(len(query_lens))])
    meta = torch.device("meta")
    # the builder's inputs come from the model runner's persistent buffers: not counted
    query_start_loc = torch.empty(len(query_lens) + 1, dtype=torch.int32, device=meta)
    seq_lens_dev = torch.empty(len(seq_lens), dtype=torch.int32, device=meta)
    block_table = torch.empty((len(seq_lens), -(-max(seq_lens) // block)), dtype=torch.int32,
                              device=meta)
    specs = eng.chunk_specs(seq_cpu, q_cpu, workspace, max_logits_bytes)
    # the Triton kernel that fills the chunk metadata: an object from 0.30.0, a jit function before
    patches = [(ix, name, _no_alloc) for name in ("_BUILD_PREFILL_CHUNK_METADATA_KERNEL",
                                                  "_build_prefill_chunk_metadata_kernel")
               if hasattr(ix, name)]
    chunks = []
    with _patched(*patches), rec.mode:
        for req_slice, query_slice in specs:
            chunk = eng.one_chunk(req_slice, query_slice, query_start_loc, qsl_cpu, seq_lens_dev,
                                  seq_cpu, block_table, workspace)
            if chunk is not None:
                chunks.append(chunk)
    prefill = ix.DeepseekV32IndexerPrefillMetadata(chunks=chunks)
    num_tokens = sum(query_lens)
    slot_mapping = torch.empty(num_tokens, dtype=torch.int64, device=meta)
    fields = dict(seq_lens=seq_lens_dev, max_seq_len=max(seq_lens), slot_mapping=slot_mapping,
                  num_decodes=0, num_decode_tokens=0, num_prefills=len(query_lens),
                  num_prefill_tokens=num_tokens, decode=None, prefill=prefill,
                  # before 0.20.0 the metadata also carries the batch's shape
                  num_reqs=len(query_lens), max_query_len=max(query_lens), num_actual_tokens=num_tokens,
                  query_start_loc=query_start_loc, head_dim=head_dim)
    known = inspect.signature(ix.DeepseekV32IndexerMetadata).parameters
    metadata = ix.DeepseekV32IndexerMetadata(**{k: v for k, v in fields.items() if k in known})
    return metadata, [(r.start, r.stop, s.start, s.stop) for r, s in specs]


def _forward_context(eng: Engine, attn_metadata):
    fc = eng.forward_context
    params = inspect.signature(fc.ForwardContext).parameters
    fields = dict(no_compile_layers={}, attn_metadata=attn_metadata, slot_mapping={},
                  virtual_engine=0)
    return fc.override_forward_context(fc.ForwardContext(**{k: v for k, v in fields.items() if k in params}))


def call_indexer(eng: Engine, req: dict, num_tokens: int, rec: Recorder, attn_metadata,
                 topk_buffer) -> None:
    """sparse_attn_indexer, the release's own function, on meta inputs of the real shapes."""
    torch, layer = eng.torch, eng.layer
    m = req["model"]
    meta = torch.device("meta")
    fp8 = torch.float8_e4m3fn
    h, d = m["index_heads"], m["head_dim"]
    blocks = -(-m["max_model_len"] // m["kv_block"]) + 1
    inputs = dict(
        hidden_states=torch.empty((num_tokens, m["hidden_size"]), dtype=torch.bfloat16, device=meta),
        k_cache_prefix=LAYER,
        kv_cache=torch.empty((blocks, m["kv_block"], d + 4), dtype=torch.uint8, device=meta),
        q_quant=torch.empty((num_tokens, h, d), dtype=fp8, device=meta),
        q_fp8=torch.empty((num_tokens, h, d), dtype=fp8, device=meta),
        q_scale=None,
        k=torch.empty((num_tokens, d), dtype=torch.bfloat16, device=meta),
        weights=torch.empty((num_tokens, h), dtype=torch.float32, device=meta),
        quant_block_size=128, scale_fmt="ue8m0", topk_tokens=m["topk"], head_dim=d,
        max_model_len=m["max_model_len"],
        total_seq_lens=req["workspace_tokens"],
        skip_k_cache_insert=False, use_pcp=False, pcp_shard_decode_requests=False,
        dense_mha_metadata_layer_name="", use_fp4_cache=False,
    )
    inputs["topk_indices_buffer"] = topk_buffer
    params = inspect.signature(layer.sparse_attn_indexer).parameters
    args = {}
    for name, p in params.items():
        if name in inputs:
            args[name] = inputs[name]
        elif p.default is inspect.Parameter.empty:
            raise NotImplementedError(f"vllm {eng.version}: sparse_attn_indexer needs {name!r}, "
                                      "which the replay does not know how to give")
    import vllm._custom_ops as ops
    import vllm.utils.deep_gemm as dg
    patches = []
    if getattr(layer, "ops", None) is not ops:  # imported only on a CUDA platform before 0.20.0
        patches.append((layer, "ops", ops))
    patches += [(ops, "indexer_k_quant_and_cache", _no_alloc),
               (ops, "cp_gather_indexer_k_quant_cache", _no_alloc),
               (ops, "top_k_per_row_prefill", _no_alloc),
               # the workspace manager empties the CUDA cache before it grows: nothing to empty
               (torch.accelerator, "empty_cache", _no_alloc)]
    logits = _meta_logits(torch, rec, req["deepgemm"])
    if hasattr(dg, "_fp8_fp4_mqa_logits_impl"):  # the wrapper's own code runs, DeepGEMM is meta
        patches += [(dg, "_fp8_fp4_mqa_logits_impl", logits), (dg, "_lazy_init", lambda: None)]
    if hasattr(dg, "_fp8_mqa_logits_impl"):  # before 0.33.0
        patches += [(dg, "_fp8_mqa_logits_impl", logits), (dg, "_lazy_init", lambda: None)]
    # before 0.20.0 the loop calls torch.ops._C.top_k_per_row_prefill itself
    patches.append((torch.ops._C, "top_k_per_row_prefill", _no_alloc))
    with _patched(*patches), _forward_context(eng, attn_metadata), rec.mode:
        layer.sparse_attn_indexer(**args)


def replay_step(eng: Engine, req: dict, step: dict | None) -> dict:
    """The server's life for one step: a fresh workspace manager, the profile run (the dummy
    forward that reserves the workspace and the logits budget), then the step (``step`` None:
    the profile run alone)."""
    torch = eng.torch
    m = req["model"]
    rec = Recorder(torch)
    start = time.perf_counter()
    eng.workspace.init_workspace_manager(torch.device("meta"))
    budget_mb = (step or {}).get("max_logits_mb", req.get("max_logits_mb"))
    if budget_mb is None:
        budget_mb = int(getattr(eng.envs, "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", 0))
    workspace = req["workspace_tokens"]
    budget_patch = (_patched((eng.envs, "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", budget_mb))
                    if hasattr(eng.envs, "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB") else contextlib.nullcontext())
    result = {"budget_mb": budget_mb}
    with budget_patch:
        with rec.in_kernel("model runner: top-k output buffer"), rec.mode:
            # reserved next to the model, [max_num_batched_tokens, topk]: counted, like the workspace
            topk_buffer = torch.empty((req["max_num_batched_tokens"], m["topk"]), dtype=torch.int32,
                                      device=torch.device("meta"))
        tokens = req["max_num_batched_tokens"] if step is None else sum(step["query_lens"])
        call_indexer(eng, req, tokens, rec, None, topk_buffer)
        result["profile_run"] = {"peak_bytes": rec.peak, "reserved_bytes": rec.current,
                                 "allocations": len(rec.allocations)}
        if step is not None:
            q, s = step["query_lens"], step["seq_lens"]
            rec.reset_peak()
            first = len(rec.allocations)
            held = rec.current  # the top-k buffer and what the profile run left: the workspace
            metadata, chunks = build_metadata(eng, q, s, budget_mb * 1024 * 1024, workspace,
                                              m["kv_block"], m["head_dim"], rec)
            result["metadata_bytes"] = rec.current - held
            call_indexer(eng, req, sum(q), rec, {LAYER: metadata}, topk_buffer)
            step_allocs = rec.allocations[first:]
            logits = [a for a in step_allocs if a["by"].startswith("DeepGEMM")]
            result.update({
                "peak_bytes": rec.peak,
                "persistent_bytes": held,
                "chunks": [list(c) for c in chunks],
                "logits_calls": [a["shape"] for a in logits],
                "logits_allocated_bytes": [a["bytes"] for a in logits],
                "num_allocations": len(step_allocs),
            })
    result["seconds"] = time.perf_counter() - start
    if req.get("record"):
        result["allocations"] = rec.allocations
    return result


def replay_request(eng: Engine, request: dict) -> list[dict]:
    results = []
    for step in request["steps"] or [None]:
        try:
            results.append(replay_step(eng, request, step))
        except Exception as exc:  # noqa: BLE001 - reported per step, as data
            results.append({"error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc(limit=-4)})
    return results


def main() -> None:
    """vLLM is imported once; then each line of stdin is a request, answered by one line."""
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vLLM may print while importing or running
    version = importlib.metadata.version("vllm")
    try:
        eng, error = Engine(), None
    except Exception as exc:  # noqa: BLE001 - reported as data: what stops this release
        eng, error = None, f"{type(exc).__name__}: {exc}"
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answer = {"vllm": version, "error": error} if eng is None else \
            {"vllm": version, "results": replay_request(eng, request)}
        real_stdout.write(json.dumps(answer) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
