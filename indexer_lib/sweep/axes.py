"""``Axes``: the values a grid sweeps, each a tuple; the grid is their product."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_int
from ..plan import STRATEGIES
from ..presets import DEFAULT_MODEL, budget_bytes_from_mb, free_bytes_from_gib, get_model
from ..workload import MAX_CONCURRENCY, MAX_OSL
from ..workload.lengths import check_range_ratio, mix_text, parse_mix
from .setting import Settings, setting

# the default ISL axis below a model's max_model_len: the reported failures' 10,240, then
# powers of two up to 128K (docs/design.md#long-contexts)
ISL_STEPS = (2048, 4096, 8192, 10240, 16384, 32768, 65536, 131072)


def default_isl(model: str) -> tuple[int, ...]:
    """The default ISL axis of a model's grids: 2,048 up to its ``max_model_len`` (GLM-5 202,752,
    DeepSeek-V3.2 163,840), where the budgeted strategies' frontiers part."""
    longest = get_model(model).max_model_len
    return tuple(i for i in ISL_STEPS if i < longest) + (longest,)


@dataclass(frozen=True)
class Axes(Settings):
    """Concurrency, ISL, OSL, the shared prefix, the prompt lengths' spread, the strategy, the budget
    and the free memory.  Checked here each on its own; against the model (max_model_len) by the grid."""

    concurrency: tuple[int, ...] = setting((1, 4, 8, 16, 24, 32, 48, 64),
                                           "clients in the closed loop, comma-separated", read="ints")
    isl: tuple[int, ...] | None = setting(  # None: 2,048 up to the model's max_model_len (default_isl)
        None, lambda: "prompt lengths, comma-separated (default: 2048 up to the model's max_model_len, "
                      f"{','.join(map(str, default_isl(DEFAULT_MODEL)))} for {DEFAULT_MODEL})", read="ints")
    osl: tuple[int, ...] = setting((64,), "output tokens per request", read="int")
    budget_mb: tuple[float, ...] = setting((64, 128, 256, 512, 1024, 2048),
                                           "logits budgets in MiB, comma-separated", read="numbers")
    strategy: tuple[str, ...] = setting(("n-only", "vllm", "per-request", "causal"),
                                        lambda: f"chunking strategies, comma-separated, of {', '.join(STRATEGIES)}",
                                        read="strs")
    free_gib: tuple[float, ...] = setting((2.63,), "memory free for the indexer at run time in GiB, comma-separated",
                                          read="numbers")
    shared_prefix: tuple[int, ...] = setting((0,), "leading tokens every prompt shares (prefix cache)", read="int")
    # mixed lengths (docs/design.md#mixed-lengths): vLLM bench's --random-range-ratio R (each prompt
    # drawn from ISL x [1 - R, 1 + R]) and mixes ("0.1x131072": a tenth of the prompts at 131,072
    # tokens, the rest at the ISL axis' value; "": none), drawn from ``length_seed``; each value is
    # one schedule per point.  A point whose longest prompt passes max_model_len is skipped.
    random_range_ratio: tuple[float, ...] = setting(
        (0.0,), "vLLM bench's random dataset: each prompt's length drawn uniformly from [ISL x (1 - R), "
                "ISL x (1 + R)], R in [0, 1) (default 0: every prompt at ISL); a point whose longest prompt "
                "passes max_model_len is skipped", read="number", metavar="R")
    mix: tuple[str, ...] = setting(
        ("",), "a share of the prompts at another length, in the same schedule: 0.1x131072 puts ceil(0.1 x "
               "prompts) prompts at 131,072 tokens, the rest at the ISL axis' value", metavar="SHARExLENGTH[+...]")
    # the workloads' ``seed`` (not a measure sweep's inputs', RunSettings.seed)
    length_seed: int = setting(0, "seed of the length draws and of where a mix's prompts fall (default 0, "
                                  "vLLM bench's)", read="int", flag="--seed", metavar="SEED")
    # every prompt in the prefix cache before the run: a rerun of the same seeded prompts
    # (docs/design.md#warm-cache)
    warm_cache: bool = setting(False, "every prompt in the prefix cache when the run starts, as when vllm bench serve "
                                      "sends its seeded random prompts again: each request computes only the tokens "
                                      "past its last cached full block (default: off, a cold cache)", read="yes-no")

    def check(self) -> None:
        for c in self.concurrency:
            check_int("concurrency", c, 1, MAX_CONCURRENCY)
        for o in self.osl:
            check_int("osl", o, 1, MAX_OSL)
        for i in self.isl or ():
            check_int("isl", i, 1)
        for p in self.shared_prefix:
            check_int("shared_prefix", p, 0)
        object.__setattr__(self, "random_range_ratio", tuple(check_range_ratio(r) for r in self.random_range_ratio))
        object.__setattr__(self, "mix", tuple(mix_text(parse_mix(m)) for m in self.mix))  # one spelling each
        check_int("length_seed", self.length_seed, 0)
        for b in self.budget_mb:
            budget_bytes_from_mb(b)
        for f in self.free_gib:
            free_bytes_from_gib(f)
        # one spelling of each value (64 and 64.0 are one budget): the grid's hash names its points
        object.__setattr__(self, "budget_mb", tuple(float(b) for b in self.budget_mb))
        object.__setattr__(self, "free_gib", tuple(float(f) for f in self.free_gib))

    def mix_lengths(self) -> list[int]:
        """The lengths the mixes put prompts at."""
        return [n for m in self.mix for _, n in parse_mix(m)]
