"""``PlanSettings``: what a plan runs under, given once and checked once.

A user names a model, an engine release, perhaps a DeepGEMM build to try the project's
strategies on, whether their budgets count DeepGEMM's padding, a K workspace, whose
temporaries the memory model adds and the GPU.  The settings resolve those names (the model's
shapes, the release's profile, the padding rules, the GPU's preset) and refuse a bad one with a
line naming it, as they refuse a GPU on which the release's indexer path is not modelled.
They are frozen and hashable: every cache of plans is keyed by them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from ..engines import DEFAULT_ENGINE, EngineProfile, check_gpu, engines_for, get_engine
from ..engines.profiles import releases_text
from ..engines.v41 import v41_path
from ..padding import AITER_RULES, DEFAULT_DEEPGEMM_VERSION, PaddingRules, get_rules, upcast_counters
from ..presets import GpuPreset, ModelPreset, get_gpu, get_model
from ..checks import BadValue, check_int

# whose per-chunk temporaries the memory model adds: the CPU reference executor's, the H200 path's
# (DeepGEMM and the window top-k), the engine release's own path (replayed), or none
TEMPORARIES = ("reference", "deepgemm", "replay", None)


@dataclass(frozen=True)
class PlanSettings:
    model: str = "deepseek-v3.2"
    # the engine release planned on (``vllm==0.33.0``; a bare ``vllm`` or ``sglang``: its latest;
    # a profile object); None: no engine, DeepGEMM 2.6 and vLLM's workspace of 40 x max_model_len
    engine: str | EngineProfile | None = None
    # the project's strategies on another DeepGEMM build (a what-if); None: the engine's own.
    # A release's own chunker always runs its own build.
    deepgemm_version: str | None = None
    padded: bool = True  # our strategies count DeepGEMM's padding against the budget (False: M x N x 4)
    workspace_tokens: int | None = None  # the K workspace; None: the engine's own
    temporaries: str | None = "reference"  # one of TEMPORARIES
    # the GPU (``data/gpus/``): its total memory caps SGLang's budget, and a release whose indexer
    # path differs on it (another logits dtype, no DeepGEMM) is refused there
    gpu: str = "h200"
    # one of the model's layer kinds that compute an indexer, planned alone (a model whose kinds see
    # a step differently, DeepSeek-V4.1, is planned kind by kind: ``make_plan``); None: the model
    kind: str | None = None
    preset: ModelPreset = field(init=False, repr=False, compare=False)
    profile: EngineProfile | None = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "preset", get_model(self.model))
        object.__setattr__(self, "model", self.preset.name)  # one spelling: GLM-5 is glm-5
        profile = None if self.engine is None else get_engine(self.engine)
        object.__setattr__(self, "profile", profile)
        if profile is not None:
            object.__setattr__(self, "engine", profile.name)  # the release in full: vllm -> its latest
        object.__setattr__(self, "gpu", check_gpu(profile, self.gpu, self.preset).name)  # one spelling: H200 is h200
        if self.preset.has_candidates:  # DeepSeek-V4.1: planned on the releases whose code for it was read
            v41_path(self.model, None if profile is None else profile.name, self.gpu_preset)
        if self.kind is not None:
            object.__setattr__(self, "preset", self.preset.for_kind(self.kind))
        if self.deepgemm_version is not None:
            get_rules(self.deepgemm_version)  # an unknown version says so here
            self._check_vendor(self.deepgemm_version)
        if self.upcast:
            self._upcast_counters  # a what-if build whose row alignment is not the bf16 rule's says so here
        if not isinstance(self.padded, bool):
            raise BadValue("padded", f"padded {self.padded!r}: must be true or false")
        if self.workspace_tokens is not None:
            check_int("workspace_tokens", self.workspace_tokens, 1)
        if self.temporaries == "engine":  # the old spelling
            raise BadValue("temporaries", "temporaries 'engine' is now spelled 'replay'")
        if self.temporaries not in TEMPORARIES:
            raise BadValue("temporaries", f"temporaries {self.temporaries!r}: must be one of "
                                          f"{', '.join(str(t) for t in TEMPORARIES)}")
        if self.preset.compressed:
            self._check_compressed(profile)
        if self.temporaries == "replay" and (profile is None or profile.path is None):
            on = "no engine" if profile is None else profile.name
            raise BadValue("temporaries", f"temporaries 'replay': {on} has no replayed path (give an "
                                          "engine release whose indexer path the project replays)")

    def _check_vendor(self, version: str) -> None:
        """A what-if logits rule runs on its vendor's GPUs only: DeepGEMM's builds on CUDA, aiter's on
        ROCm."""
        gpu = self.gpu_preset
        if gpu.rocm and version not in AITER_RULES:
            raise BadValue("deepgemm_version", f"deepgemm_version {version}: DeepGEMM is CUDA-only, and {gpu.name} "
                                               f"({gpu.arch}) scores with aiter; give one of aiter's logits rules: "
                                               f"{', '.join(AITER_RULES)}")
        if not gpu.rocm and version in AITER_RULES:
            raise BadValue("deepgemm_version", f"deepgemm_version {version}: an aiter logits rule, ROCm only; "
                                               f"{gpu.name} ({gpu.arch}) runs DeepGEMM")

    def _check_compressed(self, profile) -> None:
        """A model whose indexer scores compressed K (DeepSeek-V4's C4) runs on the releases whose
        path for it is modelled, with the H200 path's temporaries (the CPU reference executor
        computes uncompressed indexers only)."""
        compressed = next(k for k in self.preset.indexing_kinds if k.compress_ratio != 1)
        ratio, kind = compressed.compress_ratio, compressed.name
        modelled = engines_for(self.preset)
        if profile is None or profile.name not in modelled:
            on = "no engine release" if profile is None else profile.name
            if self.preset.pooled:
                path = (f"indexer path for {self.model}'s {kind} layers (K pooled {compressed.pool} tokens to an "
                        "entry) is not modelled (its code not read at this release)")
            elif self.preset.qsa:
                path = (f"prefill path for {self.model}'s QSA indexer ({ratio}x-compressed K blocks, weight-free) "
                        "is not modelled (its code not read at this release)")
            else:
                path = f"indexer path for {self.model}'s {kind} layers ({ratio}x-compressed K) is not modelled"
            raise BadValue("engine", f"{on}: its {path}; modelled on: {releases_text(modelled)}")
        gpu = self.gpu_preset
        if (profile.engine == "sglang" and gpu.cuda_family == 120
                and self.preset.c4):
            raise BadValue("gpu", f"{profile.name} on {gpu.name} ({gpu.arch}): SGLang's {kind} indexer caps its paged "
                                  "logits at 4,096 rows a call on sm12x (_SM120_INDEXER_M_CHUNK, 0.5.23 "
                                  "layers/attention/dsv4/metadata.py:68-105), which is not modelled; plan on an sm90 "
                                  "or sm100 GPU")
        if self.temporaries in ("reference", "replay"):
            raise BadValue("temporaries", f"temporaries {self.temporaries!r}: {self.model}'s {kind} indexer scores "
                                          f"{ratio}x-compressed K, which the reference executor and the replayed "
                                          "path do not compute; give 'deepgemm' (the H200 path) or None")

    def view(self, batch):
        """The step as this model's indexer sees it: its K compressed ``kv_ratio`` tokens to an
        entry (``StepBatch.compressed``), the batch itself where K is uncompressed; a kind whose
        layers run on each request's last rows (V4.1's past its last KV source) keeps those."""
        ratio = self.preset.kv_ratio
        if batch.kv_ratio == ratio and ratio != 1:
            return batch
        tail = self.preset.main_kind.replay_rows if self.kind is not None else None
        if tail is not None:
            batch = batch.tail(tail)
        return batch if ratio == 1 else batch.compressed(ratio)

    @cached_property
    def v41_path(self) -> str | None:
        """The release's path for DeepSeek-V4.1's kinds (``engines.v41``), None for other models."""
        if not get_model(self.model).has_candidates:
            return None
        return v41_path(self.model, self.engine, self.gpu_preset)

    # what the settings compute from their fields and keep: never pickled (closures, and a hash
    # of strings, which differs from process to process)
    DERIVED = ("_hash", "rules", "counters", "staged", "upcast", "_upcast_counters",
               "workspace", "own_chunker", "workspace_lifetime", "topk_output",
               "v41_path", "_kinds")

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self.DERIVED}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __hash__(self) -> int:
        # every cache of plans hashes the settings: computed once (the profile alone has 30 fields)
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.model, self.engine, self.deepgemm_version, self.padded,
                                               self.workspace_tokens, self.temporaries, self.gpu, self.profile,
                                               self.kind))
        return h

    @property
    def gpu_preset(self) -> GpuPreset:
        return get_gpu(self.gpu)

    @cached_property
    def own_chunker(self) -> "PlanSettings":
        """These settings as an engine release's own chunker runs them: the release (default: the
        latest vLLM) on its own DeepGEMM build, counting plain M x N x 4 bytes as engines do."""
        if self.profile is not None and self.deepgemm_version is None and not self.padded:
            return self
        return self.where(engine=self.profile or DEFAULT_ENGINE, deepgemm_version=None, padded=False)

    @property
    def deepgemm(self) -> str:
        """The DeepGEMM build the plan's logits are padded by: the what-if, else the engine's own; on
        a ROCm GPU, the release's aiter logits rule (``aiter_logits``; check_gpu refused the rest), its
        C4 path's own for compressed K where the release has one (SGLang's DeepSeek-V4 indexer)."""
        if self.deepgemm_version is not None:
            return self.deepgemm_version
        if self.profile is None:
            return DEFAULT_DEEPGEMM_VERSION
        if self.gpu_preset.rocm:
            arch = self.gpu_preset.arch
            if self.profile.own_rocm_c4(self.preset, self.gpu_preset):
                return self.profile.compressed_rocm_logits_on(arch)
            return self.profile.rocm_logits_on(arch)
        return self.profile.deepgemm_rules

    @cached_property  # planners read these for every step of a grid
    def rules(self) -> PaddingRules:
        return get_rules(self.deepgemm)

    @cached_property
    def counters(self):
        """(bytes counted against a budget, bytes DeepGEMM allocates) of a logits allocation, as
        ``count(rows, cols, compressed)`` (``PaddingRules.counter``)."""
        heads = self.preset.index_heads
        if self.v41_path == "torch":  # SGLang's torch scores: [rows, width] fp32, no DeepGEMM
            plain = self.rules.counter(heads, padded=False)
            return plain, plain
        if self.upcast:  # what stays allocated is the engine's fp32 copy (DeepGEMM's bf16: ``staged``)
            return self.rules.counter(heads, self.padded), self._upcast_counters[0]
        return self.rules.counter(heads, self.padded), self.rules.counter(heads)

    @cached_property
    def upcast(self) -> bool:
        """Whether DeepGEMM returns bf16 logits here and the release copies them to fp32 at their
        strides (the profile's ``sm100_logits`` on a CUDA family 100 GPU: vLLM 0.33.0 on B200, B300)."""
        return (self.profile is not None and self.profile.sm100_logits == "bfloat16+float32"
                and self.gpu_preset.cuda_family == 100 and self.v41_path != "torch")

    @cached_property
    def staged(self):
        """``count(rows, cols, compressed)``: the kernel's own logits, alive through the logits call
        next to what ``counters`` allocates (DeepGEMM's bf16 where ``upcast``), else None."""
        return self._upcast_counters[1] if self.upcast else None

    @cached_property
    def _upcast_counters(self):
        return upcast_counters(self.rules, self.preset.index_heads, self.profile.sm100_logits_stride_bytes)

    @cached_property
    def workspace(self) -> int | None:
        """K workspace tokens; None: the engine gathers each step's own K."""
        if self.workspace_tokens is not None:
            return self.workspace_tokens
        return self.workspace_at(self.preset.max_model_len)

    def workspace_at(self, max_model_len: int) -> int | None:
        """The K workspace a server started with ``max_model_len`` reserves, in tokens (entries
        of a compressed K); None: the engine gathers each step's own K."""
        if self.preset.qsa:
            return None  # QSA's paths reserve no K workspace (vLLM reads its cache in place, SGLang gathers per call)
        if self.profile is None:
            tokens = self.preset.default_workspace_factor * max_model_len
        else:
            tokens = self.profile.workspace_tokens(max_model_len)
        # vLLM sizes a compressed indexer's K workspace in entries: the buffer // compress ratio
        return None if tokens is None else tokens // self.preset.kv_ratio

    @cached_property
    def workspace_lifetime(self) -> str:
        """Where the K workspace lives: "persistent" (reserved once), "chunk" or "call".  QSA's:
        vLLM's kernel reads the paged cache in place (its chunks gather nothing: "chunk" with no
        K), SGLang gathers the step's compressed K once per call."""
        if self.preset.qsa and self.profile is not None and self.profile.qsa_path is not None:
            return "chunk" if self.profile.qsa_path == "vllm-qsa" else "call"
        return "persistent" if self.profile is None else self.profile.workspace_lifetime

    @cached_property
    def topk_output(self) -> str:
        """Where the top-k output lives: "persistent" (with the model) or per "call"."""
        return "persistent" if self.profile is None else self.profile.topk_output

    def of_kind(self, kind: str) -> "PlanSettings":
        """These settings narrowed to one of the model's kinds (``kind``), made once and kept: a
        multi-kind plan and a frontier ask for them at every step."""
        kept = self.__dict__.setdefault("_kinds", {})
        narrowed = kept.get(kind)
        if narrowed is None:
            narrowed = kept[kind] = self.where(kind=kind)
        return narrowed

    def where(self, **changes) -> "PlanSettings":
        """These settings with some changed (checked again)."""
        if "engine" not in changes and self.profile is not None:
            changes["engine"] = self.profile  # keeps a profile object given as the engine
        return replace(self, **changes)
