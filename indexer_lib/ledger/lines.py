"""A ledger of the indexer's memory over a deployment's life: one line per thing it holds or asks
for, each with its bytes and where its rule was read, and one verdict from them.

Phases (docs/design.md#the-ledger):
- ``boot``: what the indexer reserves when the server starts (its K workspace, its top-k buffer,
  what the profile run leaves free for the logits). The release sizes its KV cache after them, so
  they take KV cache, not the memory free when a step runs.
- ``prefill``, ``decode``: the most one step asks for beyond what it already holds (its
  transient peak), against the memory free when it runs.
- ``allocator``: what PyTorch's caching allocator must hold from the driver over the whole run
  (every segment it keeps), against the same free memory: a run can fail here although each
  step alone fits, when a block of a new size cannot be cut from the segments already held.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..memory import NO_LINE, first_past_free
from ..presets import format_bytes

PHASES = ("boot", "prefill", "decode", "allocator")
# the phases whose lines are compared with the memory free when a step runs
STEP_PHASES = PHASES[1:]


@dataclass(frozen=True)
class LedgerLine:
    phase: str  # one of PHASES
    name: str
    bytes: int
    source: str  # the release's file and line, or what was assumed ("assumed: ...")
    detail: str = ""  # the shape or the step, for a person

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"ledger phase {self.phase!r}: must be one of {', '.join(PHASES)}")

    def to_json(self) -> dict:
        return {"phase": self.phase, "name": self.name, "bytes": int(self.bytes), "source": self.source,
                **({"detail": self.detail} if self.detail else {})}


@dataclass(frozen=True)
class Ledger:
    """The lines, the memory free when a step runs (None: not given, no verdict) and where that
    figure comes from."""

    lines: tuple[LedgerLine, ...]
    free_bytes: int | None = None
    free_source: str = ""
    assumptions: tuple[str, ...] = ()

    def of(self, phase: str) -> tuple[LedgerLine, ...]:
        return tuple(line for line in self.lines if line.phase == phase)

    @property
    def boot_bytes(self) -> int:
        """What the indexer reserves at boot, all lines together."""
        return sum(line.bytes for line in self.of("boot"))

    @property
    def needed_bytes(self) -> int:
        """The most any step-time line asks for at once (0 without such lines)."""
        return max((line.bytes for line in self.lines if line.phase in STEP_PHASES), default=0)

    @property
    def oom_line(self) -> LedgerLine | None:
        """The first step-time line that asks for more than is free (``memory.verdict``; None: all
        fit, or no free memory given)."""
        if self.free_bytes is None:
            return None
        steps = [line for line in self.lines if line.phase in STEP_PHASES]
        first = int(first_past_free([line.bytes for line in steps], self.free_bytes))
        return None if first == NO_LINE else steps[first]

    @property
    def verdict(self) -> str | None:
        if self.free_bytes is None:
            return None
        return "oom" if self.oom_line is not None else "fits"

    def with_lines(self, *lines: LedgerLine) -> "Ledger":
        return Ledger(self.lines + tuple(lines), self.free_bytes, self.free_source, self.assumptions)

    def to_json(self) -> dict:
        """The keys ``--json`` carries: the lines, their sums and the verdict."""
        out = {"ledger": [line.to_json() for line in self.lines], "boot_bytes": self.boot_bytes,
               "needed_bytes": self.needed_bytes}
        if self.verdict is not None:  # only against a free memory given or derived
            oom = self.oom_line
            out.update(verdict=self.verdict, oom_line=None if oom is None else oom.name, free_bytes=self.free_bytes,
                       free_source=self.free_source, ledger_assumptions=list(self.assumptions))
        return out

    def text_lines(self) -> list[str]:
        """The ledger as a person reads it: one row per line, then the verdict."""
        out = []
        for line in self.lines:
            mark = "  <- OOM" if line is self.oom_line else ""
            detail = f" ({line.detail})" if line.detail else ""
            out.append(f"  {line.phase:<9} {format_bytes(line.bytes):>11}  {line.name}{detail}{mark}")
            out.append(f"  {'':<9} {'':>11}    source: {short(line.source)}")
        out.append(f"  boot: {format_bytes(self.boot_bytes)} reserved (taken from the KV cache unless its line says "
                   f"otherwise); a step needs up to "
                   f"{format_bytes(self.needed_bytes)} beyond the boot buffers")
        for a in self.assumptions:
            out.append(f"  assumed: {a}")
        return out


def short(source: str, width: int = 110) -> str:
    """A source as a text line shows it (``--json`` carries it whole)."""
    return source if len(source) <= width else source[:width - 3].rstrip() + "..."
