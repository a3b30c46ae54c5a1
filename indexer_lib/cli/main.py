"""``indexer-lab`` command line: one module per subcommand (``plan``, ``time``, ``frontier``,
``run``, ``auto``, ``replay``, ``reproduce``), each adding its parser with ``register(subparsers)``.

Bad input ends with one line naming the value and the rule, exit status 2; Ctrl-C with one line
saying what was kept, exit status 130; a reader that closes the pipe early ends it quietly.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import auto, frontier, plan, replay, reproduce, run, time

SUBCOMMANDS = (plan, time, frontier, run, auto, replay, reproduce)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (no usage block), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="indexer-lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed one usage line
        return int(e.code or 0)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # the reader stopped reading (``indexer-lab plan ... | head -1``): end quietly, as a
        # shell tool does, with nothing left to flush into the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ValueError as e:  # UsageError and the library's ValueErrors: one line, exit 2
        print(f"indexer-lab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C: one line (what was kept, where the command says), the shell's 130
        print(f"indexer-lab {args.command}: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
