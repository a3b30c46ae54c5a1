"""Engine profiles: what each vLLM, SGLang, TensorRT-LLM and ATOM release does in the indexer's prefill.

A profile is plain data read from ``data/engines/`` (one JSON file per era, each
fact with the release, file and function it was read from, and per-release
overrides where a fact changed inside an era).  A file with an ``overlay`` holds one era of a
path that changed on releases of its own (SGLang's DeepSeek-V4 C4 indexer: ``compressed_*``
facts only), laid over the profiles of the releases it lists.  ``get_engine("vllm==0.15.1")``
returns the release's profile; ``EngineProfile.sources`` says where each fact
comes from (docs/design.md#engines).
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..checks import or_list, unknown_name
from ..elementwise import where
from ..refdata import data_path

ENGINES = ("vllm", "sglang", "trtllm", "atom")
CHUNKERS = ("workspace", "logits-budget", "rows", "rows-128", "tokens", "none")
BUDGET_RULES = ("none", "fixed-mib", "fixed-elements", "sglang-free-per-call", "sglang-cached")
# SGLang's budget for DeepSeek-V4's C4 indexer: "none", every query row in one call (0.5.12-0.5.20);
# "sglang-capped-per-call", the cached rule's arithmetic read on every forward (0.5.21-0.5.23)
COMPRESSED_BUDGET_RULES = (None, "none", "sglang-capped-per-call")
LIFETIMES = ("persistent", "chunk", "call")
PATHS = (None, "vllm-request-spans", "vllm-chunk-rows", "vllm-row-ends")
# the release's prefill path for Qwen's QSA indexer (Qwen3.8-Flash-Next), where it was read:
# vLLM 0.33.0's qsa_select_paged_prefill, SGLang 0.5.23's QSAIndexer.select_prefill_tokens
QSA_PATHS = (None, "vllm-qsa", "sglang-qsa")
# DeepSeek-V4.1's kinds (engines.v41): vLLM's dense chunker for every kind, SGLang's torch scores
V41_PATHS = (None, "dense", "torch")
# the logits on CUDA family 100: fp32 from DeepGEMM, or its bf16 and the release's fp32 copy
SM100_LOGITS = ("float32", "bfloat16+float32")
# the decode path's paged logits width (memory.decode) and the decode CUDA graph's rule (engines.gpus)
DECODE_LOGITS_COLS = (None, "max_model_len", "page-table")
DECODE_CUDA_GRAPHS = (None, "sglang-memory-tiers")
DECODE_PAGE_TABLE_WIDTHS = (None, "context+drafts", "req-to-token", "req-to-token-page-reserve")


@dataclass(frozen=True)
class EngineProfile:
    engine: str  # "vllm", "sglang", "trtllm" or "atom"
    release: str  # "0.33.0"
    era: str
    # how the engine splits a step: "workspace" (pack requests while the sum of seq_lens
    # fits the workspace, rows unbounded), "logits-budget" (vLLM #36178), "rows" (SGLang:
    # query rows against the whole batch's K), "tokens" (TensorRT-LLM: requests packed while their
    # query rows fit ``chunk_rows``, a longer one cut into blocks of that many rows, each chunk's
    # logits call tiled to the element budget), "rows-128" (ATOM: "rows" with the budget's rows rounded
    # down to a multiple of 128, a power of two below 128), "none" (one logits call per step)
    chunker: str
    workspace_factor: int | None  # K workspace tokens per max_model_len; None: the batch's own K
    workspace_lifetime: str  # "persistent" (reserved once), "chunk" or "call" (allocated per chunk / call)
    budget_rule: str  # where the logits budget comes from (BUDGET_RULES)
    deepgemm_build: str
    deepgemm_rules: str | None  # padding rule name (indexer_lib.padding); None: no DeepGEMM (ROCm only)
    layout: str  # "full" ([M, N]) or "compressed" ([M, max_seqlen_k] of the chunk's requests)
    topk: str  # "kernel" (writes into the output, nothing else) or "torch.topk"
    topk_output: str  # "persistent" ([max_num_batched_tokens, k] with the model) or "call"
    logits_alive: int  # logits tensors alive at once (2: the previous chunk's until the next is allocated)
    dummy_run: str
    dummy_logits_reservation: bool  # the profile run allocates the logits budget
    # the scheduler's defaults as the release serves (the OpenAI server on an H200-class GPU)
    scheduler_max_num_batched_tokens: int
    scheduler_long_prefill_token_threshold: int
    scheduler_max_num_seqs: int
    scheduler_async_scheduling: bool
    metadata: tuple[str, ...] = ()
    budget_env: str | None = None
    budget_default: float | None = None  # vLLM: MiB; SGLang: the fraction of free memory; TensorRT-LLM: elements
    chunk_skip_elements: int | None = None  # SGLang: below this many logits elements, one call
    skip_logits_at_or_below_topk: bool = False  # SGLang: no logits when every seq_len <= top-k
    logits_dtype: str = "float32"
    clean_logits: bool = False  # DeepGEMM's clean_logits kernel runs after each logits call
    # the engine's own path around the logits, as replayed from its code (``run.replay``);
    # None: not replayed, so the memory model's ``engine`` backend refuses the release
    # "vllm-request-spans" (0.15.1, 0.19.0): every chunk's metadata held, ks/ke for all rows of its
    # requests; "vllm-chunk-rows" (0.20.0, 0.30.0): ks/ke for its own rows; "vllm-row-ends"
    # (0.33.0): the same, and row_ends + zeros per chunk
    path: str | None = None
    workspace_align: int = 1  # the workspace manager rounds each buffer up to this many bytes
    # a smaller factor above a max_model_len (vLLM 0.33: 16 instead of 40 above 256K): [above, factor]
    workspace_factor_long: tuple | None = None
    # the release's path for an indexer over compressed K (DeepSeek-V4's C4) is modelled: the same
    # chunker on seq_len // ratio entries and a K buffer of the workspace // ratio entries
    compressed_kv: bool = False
    # on it, the chunker packs a chunk's entries against the undivided workspace (ratio times the K
    # buffer: vLLM 0.20.0-0.31.0), so a chunk may hold more entries than the buffer; its K is sliced
    # to the buffer, which caps the logits' width (``plan.paths._vllm_packing``)
    compressed_pack_undivided: bool = False
    # on it, no logits at all while the step's longest compressed K is at most top-k (vLLM 0.27.0 on)
    compressed_skip_short: bool = True
    # the release's path for a pooled indexer (GLM-5.3-Flash's kpool: pools of ``pool`` tokens are
    # its compressed entries) is modelled: vLLM 0.33.0 runs the compressed chunker on it and skips
    # the logits while the longest prefill is at most top-k tokens; SGLang 0.5.23 has a path of its
    # own (``plan.paths.SglangKpool``)
    pooled_kv: bool = False
    # SGLang's own path for compressed K (DeepSeek-V4's C4 indexer, sglang 0.5.12-0.5.23
    # layers/attention/dsv4/, the sglang-dsv4- files in data/engines/): its budget rule
    # (COMPRESSED_BUDGET_RULES; None: ``budget_rule``; "none": one call, no budget), the
    # logits alive at once on it (None: ``logits_alive``), the page of ``compressed_page_tokens``
    # tokens whose entries set the paged logits' width, and the query rows from which a one-request
    # step takes the non-paged sub-path (None: never)
    compressed_budget_rule: str | None = None
    compressed_logits_alive: int | None = None
    compressed_page_tokens: int | None = None
    compressed_nonpaged_min_rows: int | None = None
    # its C4 path on ROCm where read (``plan.paths.SglangC4Hip``): the logits rule of the allocation
    # the release makes there (``aiter_logits``), the architectures it is modelled on, and one line
    # with its file and line saying what that path runs (None: not read, and refused)
    compressed_rocm_logits: str | None = None
    compressed_rocm_arches: tuple | None = None
    compressed_rocm_path: str | None = None
    # what of that path is modelled, said where another release is refused (its default indexer,
    # and what runs only when asked)
    compressed_rocm_scope: str | None = None
    # its prefill path for Qwen's QSA indexer (QSA_PATHS; None: not read, and refused), and that
    # path's own logits budget in MiB where it is a constant of its own (SGLang 0.5.23: 128 MiB;
    # None: the release's ``budget_env``)
    qsa_path: str | None = None
    qsa_budget_mib: int | None = None
    # its path for DeepSeek-V4.1's indexer kinds (V41_PATHS; None: not read, and refused), and the
    # CUDA family it was read for where the release takes another path on others (None: every one)
    v41_path: str | None = None
    v41_cuda_family: int | None = None
    workspace_extra_bytes: int = 0  # bytes the profile run adds to the shared workspace (kept)
    # how the scheduler defaults above change with the GPU's memory and kind (``engines.gpus``)
    scheduler_gpu_rule: str = "none"
    # the logits on CUDA family 100 (B200, B300): "float32" as elsewhere, or "bfloat16+float32"
    # (vLLM 0.33: DeepGEMM returns bf16 logits and the release copies them to fp32 while both live)
    sm100_logits: str = "float32"
    # "bfloat16+float32": the bytes DeepGEMM aligns a bf16 logits row to (its row stride), which the
    # fp32 copy keeps (padding.upcast_counters)
    sm100_logits_stride_bytes: int | None = None
    # the CUDA capability families (90, 100, 120) on which the release runs DeepGEMM's logits;
    # None: every CUDA GPU
    deepgemm_families: tuple | None = None
    # the compute-capability majors (9, 10, 12) on which the release has an indexer path for these
    # models at all (vLLM: a sparse-MLA attention backend; SGLang: a DeepGEMM kernel); None: not read
    indexer_cuda_majors: tuple | None = None
    # TensorRT-LLM: query rows per indexer chunk (indexer_max_chunk_size's default), and the smaller
    # row counts it picks by the step's longest compressed K: [[more than this many entries, rows], ...]
    chunk_rows: int | None = None
    chunk_rows_by_kv: tuple | None = None
    # speculative decoding: the most draft tokens a decode may carry and still take the indexer's
    # decode path (vLLM 0.13-0.18: one, as DeepGEMM's paged logits took at most two tokens per
    # request); None: any number.  A decode with more goes through the prefill path.
    indexer_decode_max_drafts: int | None = None
    # vLLM's default --gpu-memory-utilization, the share of the GPU its KV cache and everything else
    # may take (engines.kv_capacity); None: not vLLM's rule, or not read
    gpu_memory_utilization: float | None = None
    # vLLM 0.33: with TP > 1 a step of at least this many prefill rows is split over the TP ranks,
    # each scoring its own rows (not modelled: refused); None: every rank scores every row
    tp_prefill_row_shard_min_rows: int | None = None
    # SGLang's DP attention (--dp-size N --enable-dp-attention; --attn-dp-size N from 0.5.22): N
    # ranks, each with its own scheduler, its chunked_prefill_size and a given
    # max_running_requests divided by N, and the requests dealt round robin (``engines.dp_attention``);
    # False: the release has no such mode, or it is not read
    dp_attention: bool = False
    # whether a lone request (the only one running or waiting) takes its chunk past
    # long_prefill_token_threshold (vLLM 0.33.0: nobody to starve) or is capped as any other (before)
    scheduler_threshold_lone_exempt: bool = True
    # a finite KV cache (docs/design.md#preemption): whether the scheduler admits a waiting request
    # only when its whole sequence fits in the free blocks (vLLM 0.19.0 on: scheduler_reserve_full_isl)
    # or already when its first chunk does (0.13-0.18); and whether freed blocks no prefix-cache entry
    # holds go to the free queue's front, to be reused first (0.30.0 on), or to its end with the rest
    scheduler_reserve_full_isl: bool = True
    scheduler_free_uncached_first: bool = True
    # with speculative decoding, a waiting request with one token left (a full prefix-cache hit)
    # is scheduled as a decode padded to 1 + drafts tokens (vLLM 0.30.0 on)
    scheduler_pad_new_decodes: bool = False
    # the decode path's logits (docs/design.md#the-ledger): "max_model_len" where the release asks
    # DeepGEMM's paged logits for [decode tokens, max_model_len] fp32 on every decode step (vLLM's
    # DeepSeek indexer); "page-table" where it asks for the page table's width, the request-to-token
    # row rounded to 64-token pages (SGLang's DSA indexer); None: not read, and no decode line
    decode_logits_cols: str | None = None
    # SGLang's "page-table" width in tokens (memory.decode.page_table_tokens): "context+drafts"
    # (0.5.13-0.5.14), "req-to-token" (the request-to-token row: 4 more, 0.5.15-0.5.16),
    # "req-to-token-page-reserve" (its headroom with drafts grown to a page, 0.5.17 on)
    decode_page_table_width: str | None = None
    # SGLang 0.5.20 on: a paged call of more requests than the GPU has SMs is made in SM-count
    # chunks and torch.cat joins them, every chunk alive at the cat
    decode_logits_sm_chunks: bool = False
    # the decode CUDA graph captured by default, whose pool holds the largest capture's logits and
    # whose replays allocate none ("sglang-memory-tiers": SGLang's largest captured batch by GPU
    # memory and TP, engines.gpus.decode_graph_max_bs); None: not read, every decode step eager
    decode_cuda_graph: str | None = None
    # vLLM 0.33.0's kpool path: the profile run reserves the larger of the logits budget and the
    # worst decode step's logits, [min(max_num_seqs x (1 + drafts), max_num_batched_tokens), max_model_len // 4]
    pooled_decode_reservation: bool = False
    # SGLang 0.5.21 on, DeepSeek-V4: an opt-in breakable prefill CUDA graph (off by default for the
    # model) captures the C4 paged logits at a fixed context width, unchunked, into its graph pool;
    # --cuda-graph-prefill-max-context bounds the width (ledger.boot.prefill_graph_line)
    compressed_prefill_graph: bool = False
    # ROCm (docs/design.md#rocm): the aiter logits rule (``aiter_logits``) of the release's indexer
    # path on the GPU architectures ``rocm_arches`` where that path is modelled (None: on none), one
    # rule for all of them or, where the release calls another kernel per architecture, ((arch,
    # rule), ...) (the JSON's {arch: rule}; read with ``rocm_logits_on``); ``rocm_path``: one line,
    # with the release's file and line, saying what its indexer runs on ROCm, and
    # ``rocm_not_modelled`` why the rest is refused (None: the path was not read)
    rocm_logits: str | tuple | None = None
    rocm_arches: tuple | None = None
    rocm_path: str | None = None
    rocm_not_modelled: str | None = None
    # the ROCm architectures on which the release's indexer for compressed K (DeepSeek-V4's C4) is
    # modelled, with the same path and rule as its DSA indexer there (None: on none), and one line
    # with the release's file and line saying why it is refused on the others (None: not read)
    rocm_compressed_arches: tuple | None = None
    rocm_compressed_not_modelled: str | None = None
    # the non-default setting the modelled ROCm path needs (named wherever its numbers are shown)
    rocm_setting: str | None = None
    # SGLang 0.5.20 on: the logits budget on ROCm is at most this many bytes a call (None: no cap)
    rocm_budget_cap_bytes: int | None = None
    # the release runs only on ROCm (ATOM: AMD GPUs, aiter's kernels); refused on any other GPU
    rocm_only: bool = False
    # vLLM 0.33.0 on ROCm: the profile run asks the shared workspace for the decode logits,
    # [min(max_num_batched_tokens, max_num_seqs x (1 + drafts)), max_model_len] fp32, which the
    # workspace keeps for the server's life (ledger.boot.rocm_decode_workspace_bytes)
    rocm_decode_workspace: bool = False
    sources: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        for name, value, allowed in (("engine", self.engine, ENGINES), ("chunker", self.chunker, CHUNKERS),
                                     ("budget_rule", self.budget_rule, BUDGET_RULES),
                                     ("workspace_lifetime", self.workspace_lifetime, LIFETIMES),
                                     ("layout", self.layout, ("full", "compressed")),
                                     ("path", self.path, PATHS),
                                     ("compressed_budget_rule", self.compressed_budget_rule,
                                      COMPRESSED_BUDGET_RULES),
                                     ("qsa_path", self.qsa_path, QSA_PATHS),
                                     ("v41_path", self.v41_path, V41_PATHS),
                                     ("sm100_logits", self.sm100_logits, SM100_LOGITS),
                                     ("decode_logits_cols", self.decode_logits_cols, DECODE_LOGITS_COLS),
                                     ("decode_cuda_graph", self.decode_cuda_graph, DECODE_CUDA_GRAPHS),
                                     ("decode_page_table_width", self.decode_page_table_width,
                                      DECODE_PAGE_TABLE_WIDTHS)):
            if value not in allowed:
                raise ValueError(f"engine profile {self.engine}=={self.release}: {name} {value!r} "
                                 f"must be one of {', '.join(allowed)}")
        if isinstance(self.rocm_logits, tuple) and sorted(a for a, _ in self.rocm_logits) != sorted(self.rocm_arches or ()):
            raise ValueError(f"engine profile {self.engine}=={self.release}: rocm_logits names a rule for "
                             f"each of rocm_arches {self.rocm_arches}, no other")
        if not set(self.rocm_compressed_arches or ()) <= set(self.rocm_arches or ()):
            raise ValueError(f"engine profile {self.engine}=={self.release}: rocm_compressed_arches "
                             f"{self.rocm_compressed_arches} must be among rocm_arches {self.rocm_arches}")
        if (self.sm100_logits != "float32") != (self.sm100_logits_stride_bytes is not None):
            raise ValueError(f"engine profile {self.engine}=={self.release}: sm100_logits {self.sm100_logits!r} "
                             "takes sm100_logits_stride_bytes exactly where it is not 'float32'")

    @property
    def name(self) -> str:
        return f"{self.engine}=={self.release}"

    def rocm_logits_on(self, arch: str) -> str | None:
        """The aiter logits rule of the release's indexer on this ROCm architecture, or None where
        its path there is not modelled (``rocm.rocm_refusal`` says why)."""
        if self.rocm_logits is None or arch not in (self.rocm_arches or ()):
            return None
        if isinstance(self.rocm_logits, tuple):
            return dict(self.rocm_logits)[arch]
        return self.rocm_logits

    def compressed_rocm_logits_on(self, arch: str) -> str | None:
        """The logits rule of the release's C4 path on this ROCm architecture, or None where that
        path is not modelled there."""
        return self.compressed_rocm_logits if arch in (self.compressed_rocm_arches or ()) else None

    def own_rocm_c4(self, model, gpu) -> bool:
        """Whether this model's indexer takes the release's own C4 path on this GPU, a ROCm one
        (``plan.paths.SglangC4Hip``: SGLang's DeepSeek-V4 indexer, on the architectures it was read
        for).  The one place this is decided: the path, its logits rule, its budget (none) and the
        refusals follow it."""
        return (gpu is not None and gpu.rocm and model.c4
                and self.compressed_rocm_logits_on(gpu.arch) is not None)

    def indexer_decode_threshold(self, speculative_tokens: int) -> int:
        """New tokens up to which a request takes the indexer's decode path, with this many
        draft tokens per decode."""
        cap = self.indexer_decode_max_drafts
        return 1 + (speculative_tokens if cap is None else min(speculative_tokens, cap))

    @property
    def compressed_one_call(self) -> bool:
        """Its own path for compressed K reads no budget: every query row in one call (SGLang
        0.5.12-0.5.20's C4 path, ``compressed_budget_rule`` "none")."""
        return self.compressed_budget_rule == "none"

    @property
    def pooled_one_call(self) -> bool:
        """Its own path for pooled K reads no budget: every context row in one call against the
        block table's whole pooled width (TensorRT-LLM's ``glm_kpool``)."""
        return self.engine == "trtllm" and self.pooled_kv

    def one_call_for(self, model, gpu=None) -> bool:
        """Its own path for this model's indexer (a ``presets.ModelPreset``) reads no budget: every
        row in one call (SGLang 0.5.12-0.5.20's C4 path, its C4 path on ROCm where modelled on
        ``gpu``, TensorRT-LLM's kpool path)."""
        if model.kv_ratio == 1:
            return False
        if model.pooled:
            return self.pooled_one_call
        return self.compressed_one_call or self.own_rocm_c4(model, gpu)

    @property
    def has_budget(self) -> bool:
        return self.budget_rule != "none"

    def workspace_tokens(self, max_model_len: int) -> int | None:
        """The K workspace the engine reserves, or None where it gathers each step's own K."""
        if self.workspace_factor is None:
            return None
        if self.workspace_factor_long is not None and max_model_len > self.workspace_factor_long[0]:
            return self.workspace_factor_long[1] * max_model_len
        return self.workspace_factor * max_model_len

    @property
    def default_budget_mb(self) -> float | None:
        """The release's default budget in MiB (an element cap as its fp32 bytes); None without one."""
        if self.budget_rule == "fixed-mib":
            return self.budget_default
        if self.budget_rule == "fixed-elements":
            return self.budget_default * 4 / 2**20
        return None

    def chunk_rows_for(self, longest_kv):
        """TensorRT-LLM's query rows per indexer chunk for a step whose longest (compressed) K is
        ``longest_kv`` entries (a number, or an array of them): the configured rows, lowered (never
        raised) past the first threshold it passes."""
        rows = self.chunk_rows
        for above, fewer in reversed(self.chunk_rows_by_kv or ()):  # the first threshold passed wins
            rows = where(longest_kv > above, min(self.chunk_rows, fewer), rows)
        return rows

    def deploy_line(self, value) -> str:
        """The setting that selects a budget, as one deploys it (the env var and its value)."""
        if self.budget_env is None:
            raise ValueError(f"{self.name} has no logits-budget setting")
        if self.budget_rule == "fixed-elements":
            return f"{self.budget_env}={int(value)}"  # an integer the engine parses with int()
        return f"{self.budget_env}={value:g}"


_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:rc(\d+))?(?:\.post(\d+))?$")
_FINAL = 10**9  # a final release sorts after every release candidate of its version


def _parse_version(text: str) -> tuple:
    """'0.5.13.post1' -> (0, 5, 13, F, 1); '1.3.0rc15.post1' -> (1, 3, 0, 15, 1), F after every rc:
    sorts releases (ValueError for anything else)."""
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(f"not a release version: {text!r}")
    main, rc, post = match.groups()
    return tuple(int(p) for p in main.split(".")) + (_FINAL if rc is None else int(rc), int(post or 0))


@lru_cache(maxsize=None)
def _load() -> dict[str, EngineProfile]:
    profiles: dict[str, EngineProfile] = {}
    files = sorted(data_path("engines").glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{data_path('engines')}: no engine profiles (data/engines/*.json)")
    eras = [(path, json.loads(path.read_text())) for path in files]
    overlays: dict[str, tuple] = {}  # release name -> (file, its facts)
    for path, era in eras:
        if "overlay" not in era:
            continue
        for release in era["releases"]:
            facts = {**era["facts"], **era.get("per_release", {}).get(release, {})}
            other = [k for k in facts if not k.startswith("compressed_")]
            name = f"{era['engine']}=={release}"
            if other or name in overlays:
                raise ValueError(f"data/engines/{path.name}: {name}: an overlay holds compressed_* facts only, "
                                 f"one per release ({', '.join(other) or 'in two overlays'})")
            overlays[name] = (path, facts)
    for path, era in eras:
        if "overlay" in era:
            continue
        for release in era["releases"]:
            facts = {**era["facts"], **era.get("per_release", {}).get(release, {})}
            overlay = overlays.pop(f"{era['engine']}=={release}", None)
            if overlay is not None:
                facts = {**facts, **overlay[1]}
            values = {k: v["value"] for k, v in facts.items()}
            for name in ("metadata", "workspace_factor_long", "deepgemm_families", "indexer_cuda_majors", "rocm_arches",
                         "rocm_compressed_arches", "compressed_rocm_arches"):
                if values.get(name) is not None:
                    values[name] = tuple(values[name])
            if isinstance(values.get("rocm_logits"), dict):  # a rule per architecture, hashable
                values["rocm_logits"] = tuple(sorted(values["rocm_logits"].items()))
            if values.get("chunk_rows_by_kv") is not None:
                values["chunk_rows_by_kv"] = tuple(tuple(pair) for pair in values["chunk_rows_by_kv"])
            sources = {k: v["source"] for k, v in facts.items()}
            sources["file"] = f"data/engines/{path.name}"
            if overlay is not None:
                sources["compressed_file"] = f"data/engines/{overlay[0].name}"
            profile = EngineProfile(engine=era["engine"], release=release, era=era["era"], sources=sources,
                                    **values)
            if profile.name in profiles:
                raise ValueError(f"{profile.name}: in two engine profile files")
            profiles[profile.name] = profile
    if overlays:
        raise ValueError(f"engine profile overlays for unknown releases: {', '.join(overlays)}")
    return dict(sorted(profiles.items(), key=lambda kv: (kv[1].engine, _parse_version(kv[1].release))))


def engine_names(engine: str | None = None) -> list[str]:
    """Every known release as ``engine==X.Y.Z``, oldest first (of one engine if given)."""
    return [n for n, p in _load().items() if engine is None or p.engine == engine]


def replayed_engines() -> list[str]:
    """The releases whose own indexer path the project replays (a ``path`` in their profile)."""
    return [n for n, p in _load().items() if p.path is not None]


def compressed_kv_engines() -> list[str]:
    """The releases whose indexer path for compressed K the project models (``compressed_kv``)."""
    return [n for n, p in _load().items() if p.compressed_kv]


def pooled_kv_engines() -> list[str]:
    """The releases whose indexer path for pooled K (GLM-5.3-Flash's kpool) the project models."""
    return [n for n, p in _load().items() if p.pooled_kv]


def engines_for(preset) -> list[str]:
    """The releases whose indexer path for a model (a ``presets.ModelPreset``) the project models,
    oldest first: for compressed K, those with its kind of path (V4.1's kinds, pooled K, QSA, or
    compressed K); every release for uncompressed K."""
    if preset.has_candidates:
        return v41_engines()
    if not preset.compressed:
        return list(_load())
    return pooled_kv_engines() if preset.pooled else qsa_engines() if preset.qsa else compressed_kv_engines()


def v41_engines() -> list[str]:
    """The releases whose path for DeepSeek-V4.1's indexer kinds the project models (``v41_path``)."""
    return [n for n, p in _load().items() if p.v41_path is not None]


def releases_text(names: list[str]) -> str:
    """Release names in one short phrase: each run of consecutive releases of an engine (every
    release the profiles know between its first and last) as ``sglang==0.5.12-0.5.23``."""
    known, runs = list(_load()), []
    for name in names:
        i = known.index(name)
        last = runs[-1] if runs else None
        if last and known.index(last[-1]) == i - 1 and _load()[last[-1]].engine == _load()[name].engine:
            last.append(name)
        else:
            runs.append([name])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{_load()[run[-1]].release}" for run in runs)


def qsa_engines() -> list[str]:
    """The releases whose prefill path for Qwen's QSA indexer the project models (``qsa_path``)."""
    return [n for n, p in _load().items() if p.qsa_path is not None]


def latest(engine: str) -> EngineProfile:
    return _load()[engine_names(engine)[-1]]


DEFAULT_ENGINE = "vllm"  # the latest vLLM release
# other spellings of an engine's name: its package name, as ``pip show`` prints it
ENGINE_ALIASES = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm"}


# a pre-release or development build: 0.16.0rc2.dev126, 0.16.0.dev3+g1234, 0.5.23rc1
_BUILD_SUFFIX = re.compile(r"(?:\.?dev\d+)?(?:\+[\w.]+)?$")
_PRE_RELEASE = re.compile(r"^(\d+(?:\.\d+)*?)(?:\.post\d+)?(?:(?:rc|a|b)\d+)?(?:\.?dev\d+)?(?:\+[\w.]+)?$")


def normalise_engine(spec: str) -> tuple[str, str | None]:
    """``(name, note)``: an engine spec as the profiles name it, and what was changed to get
    there (None: nothing but case, spaces and a leading v).  ``vLLM==v0.16.0`` is
    ``vllm==0.16.0``, ``TensorRT-LLM==1.4.0rc4`` is ``trtllm==1.4.0rc4``; a pre-release or
    development build (``0.16.0rc2.dev126``) is planned as the release it leads to, and the note
    says so; one leading to a release without a profile (``0.28.1rc1.dev628``) is planned as the
    release before it, whose code it is (TensorRT-LLM's release candidates are releases: each is a
    profile of its own, and an unknown one is refused)."""
    text = str(spec).strip().lower().replace(" ", "")
    engine, sep, version = text.partition("==")
    engine = ENGINE_ALIASES.get(engine, engine)
    if not sep:
        return engine, None
    version = version.removeprefix("v")
    name = f"{engine}=={version}"
    if name in _load():
        return name, None
    # a development or local build of a known release (TensorRT-LLM: of a release candidate)
    built = f"{engine}=={_BUILD_SUFFIX.sub('', version)}"
    if built != name and built in _load():
        return built, f"{spec} is a pre-release or development build: planned as {built}"
    match = _PRE_RELEASE.match(version)
    if match and match.group(1) != version and not version.startswith(match.group(1) + ".post"):
        release = f"{engine}=={match.group(1)}"
        if release in _load():
            return release, f"{spec} is a pre-release or development build: planned as {release}"
        # a build of a release without a profile: its code is the release before it (TensorRT-LLM:
        # a release candidate is a release, so only its development builds count)
        leads_to = built.partition("==")[2] if engine == "trtllm" else match.group(1)
        before = None if engine == "trtllm" and built == name else release_before(engine, leads_to)
        if before is not None:
            return before, (f"{spec} is a pre-release or development build of {engine} {leads_to}, which has no "
                            f"profile: planned as {before}, the release before it (its code)")
    return name, None


def release_before(engine: str, version: str) -> str | None:
    """The latest known release of ``engine`` strictly before ``version`` (None: none, or an
    unreadable version)."""
    try:
        wanted = _parse_version(version)
    except ValueError:
        return None
    before = [r for r in engine_names(engine) if _parse_version(r.split("==")[1]) < wanted]
    return before[-1] if before else None


def nearest_release(name: str) -> str | None:
    """The known release nearest to an unknown ``ENGINE==X.Y.Z``: the latest at or before it,
    else the first; None for an unknown engine or an unreadable version."""
    engine, _, version = name.partition("==")
    releases = engine_names(engine) if engine in ENGINES else []
    try:
        wanted = _parse_version(version)
    except ValueError:
        return None
    if not releases:
        return None
    before = [r for r in releases if _parse_version(r.split("==")[1]) <= wanted]
    return before[-1] if before else releases[0]


def get_engine(spec: str | EngineProfile | None = None) -> EngineProfile:
    """A release's profile from ``vllm==0.15.1``, ``sglang==0.5.23`` or a bare engine name
    (its latest release); None: the latest vLLM.  Case, spaces and a leading ``v`` do not
    matter, and a pre-release build is its release (``normalise_engine``)."""
    if isinstance(spec, EngineProfile):
        return spec
    given = DEFAULT_ENGINE if spec is None else str(spec).strip()
    spec, _ = normalise_engine(given)
    profiles = _load()
    if spec in ENGINES:
        return latest(spec)
    if spec in profiles:
        return profiles[spec]
    every = releases_text([name for engine in ENGINES for name in engine_names(engine)])
    raise unknown_name("engine", "engine release", given, list(profiles), near=near_releases(spec),
                       rule=f"ENGINE==RELEASE, one of {every}, or a bare {or_list(list(ENGINES))} (its latest)")


def near_releases(spec: str) -> list[str]:
    """The known names nearest to an unknown engine spec, nearest first: the release at or before
    it of the engine it names (or of the engine spelled nearest: ``vlm==0.33.0`` is
    ``vllm==0.33.0``), then the names spelled alike."""
    engine, sep, version = spec.partition("==")
    if engine not in ENGINES:
        engine = next(iter(difflib.get_close_matches(engine, ENGINES, n=1)), engine)
    if sep:
        first = nearest_release(f"{engine}=={version}")
    else:  # a bare engine name
        first = engine if engine in ENGINES else None
    alike = difflib.get_close_matches(spec, [*ENGINES, *engine_names()], n=3)
    return [name for name in (first, *alike) if name is not None]
