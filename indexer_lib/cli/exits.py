"""The exit statuses: one meaning each, the same in every subcommand, and the help epilogs that
state them (each subcommand says what its 0 and 1 are)."""
from __future__ import annotations

DONE = 0  # it fits, or the command did what was asked
NEGATIVE = 1  # a verdict the user asked for came out negative: OOM, nothing fits
BAD_INPUT = 2  # one line naming the value and the rule
FAILED = 3  # the command could not finish: the replayed engine's code, or a bug (with its traceback)
INTERRUPTED = 130  # Ctrl-C, as a shell reports an interrupted command

RULES = ("2  bad input: one line on stderr naming the value and the rule\n"
         "3  the command could not finish: the replayed engine's own code failed, or indexer-lab did\n"
         "   (a bug: its traceback is on stderr)\n"
         "130  interrupted (Ctrl-C)")

SUMMARY = ("exit status, the same in every subcommand:\n"
           "0  it fits, or the command did what was asked\n"
           "1  the verdict asked for is negative: OOM (plan, run with --free-gib), nothing fits (auto),\n"
           "   a report not as data/field/ says (reproduce)\n" + RULES)


def epilog(done: str, negative: str | None = None) -> str:
    """A subcommand's help epilog: what its 0 and 1 mean (None: it gives no verdict, never 1)."""
    one = f"1  {negative}" if negative else "1  not used: this command gives no verdict"
    return f"exit status:\n0  {done}\n{one}\n{RULES}"
