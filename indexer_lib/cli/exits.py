"""The exit statuses: one meaning each, the same in every subcommand, and the help epilogs that
state them (each subcommand says what its 0 and 1 are)."""
from __future__ import annotations

import textwrap

DONE = 0  # it fits, or the command did what was asked
NEGATIVE = 1  # a verdict the user asked for came out negative: OOM, nothing fits
BAD_INPUT = 2  # one line naming the value and the rule
FAILED = 3  # the command could not finish: the replayed engine's code, or a bug (with its traceback)
INTERRUPTED = 130  # Ctrl-C, as a shell reports an interrupted command

OTHERS = {2: "bad input: one line on stderr naming the value and the rule",
          3: "the command could not finish: the replayed engine's own code failed, or indexer-lab did "
             "(a bug: its traceback is on stderr)",
          130: "interrupted (Ctrl-C)"}


def table(meanings: dict[int, str]) -> str:
    """``exit status:`` and one entry per status, each wrapped under its own indent."""
    lines = ["exit status:"]
    for code, meaning in meanings.items():
        lines.append(textwrap.fill(meaning, 80, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7,
                                   break_on_hyphens=False))
    return "\n".join(lines)


SUMMARY = table({0: "it fits, or the command did what was asked",
                 1: "the verdict asked for is negative: OOM (plan, time, run with --free-gib), nothing fits (auto), "
                    "a report not as data/field/ says (reproduce)", **OTHERS})


def epilog(done: str, negative: str | None = None) -> str:
    """A subcommand's help epilog: what its 0 and 1 mean (None: it gives no verdict, never 1)."""
    return table({0: done, 1: negative or "not used: this command gives no verdict", **OTHERS})
