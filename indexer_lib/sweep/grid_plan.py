"""``GridPlan``: what every point of a grid plans with, one ``PlanSettings`` per engine release."""
from __future__ import annotations

from dataclasses import dataclass

from ..engines import DEFAULT_ENGINE, get_engine
from ..plan import PlanSettings
from ..presets import DEFAULT_MODEL, GPUS, MODELS, get_model
from .setting import Settings, setting


@dataclass(frozen=True)
class GridPlan(Settings):
    """The model, the engine releases (each plans on its own DeepGEMM, workspace and layout; the
    ``engine`` strategy is its own chunker), a DeepGEMM what-if, padded budgets, whose temporaries
    each chunk adds, and the GPU.  Made once, it holds each release's ``PlanSettings``."""

    model: str = setting(DEFAULT_MODEL, lambda: f"one of {', '.join(sorted(MODELS))} (default: {DEFAULT_MODEL})")
    # engine releases (ENGINE==RELEASE; a bare vllm or sglang: its latest)
    engine: tuple[str, ...] = setting(
        (DEFAULT_ENGINE,), read="engine",
        help=lambda: "plan on this engine release (vllm==0.19.0, sglang==0.5.23; default: the latest "
                     f"vLLM, {get_engine(DEFAULT_ENGINE).name}); --strategy engine is its own chunker")
    # None: each engine's own DeepGEMM; a version: the project's strategies on that build instead
    deepgemm_version: str | None = setting(
        None, "default: the --engine release's; another version: our strategies on that build")
    padded: bool = setting(True, "budget with vLLM's unpadded M x N x 4 arithmetic", flag="--no-padding",
                           read="off")
    # whose temporaries each chunk adds: "deepgemm" (the H200 path), "reference", or None
    temporaries: str | None = setting(
        "deepgemm", "whose per-chunk temporaries the peaks count: the H200 path (deepgemm, default), "
                    "the CPU reference executor, or none (logits and metadata only)",
        read="temporaries", metavar="{deepgemm,reference,none}")
    # the GPU (``data/gpus/``): each release's scheduler defaults on it, SGLang's budget cap from
    # its memory; a release whose indexer path differs on it is refused
    gpu: str = setting("h200", lambda: f"one of {', '.join(GPUS)} (default h200; data/gpus/): each release's "
                                       "scheduler defaults on it, SGLang's budget cap from its memory")

    def check(self) -> None:
        object.__setattr__(self, "model", get_model(self.model).name)  # one spelling: GLM-5 is glm-5
        settings = [PlanSettings(self.model, e, self.deepgemm_version, self.padded, None, self.temporaries, self.gpu)
                    for e in self.engine]
        object.__setattr__(self, "gpu", settings[0].gpu)  # one spelling: H200 is h200
        # the releases' full names: a grid means the same whatever release is newest later
        object.__setattr__(self, "engine", tuple(dict.fromkeys(s.engine for s in settings)))
        object.__setattr__(self, "_settings", {s.engine: s for s in settings})  # not a field

    def settings(self, engine: str) -> PlanSettings:
        """The plan settings on one of the releases."""
        return self._settings[engine]
