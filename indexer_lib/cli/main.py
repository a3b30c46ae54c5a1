"""``indexer-lab`` command line: one module per subcommand (``plan``, ``frontier``,
``run``, ``auto``, ``replay``), each adding its parser with ``register(subparsers)``.

Bad input ends with one line naming the value and the rule, exit status 2.
"""
from __future__ import annotations

import argparse
import sys

from . import auto, frontier, plan, replay, run

SUBCOMMANDS = (plan, frontier, run, auto, replay)


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
        return args.func(args)
    except ValueError as e:  # UsageError and the library's ValueErrors: one line, exit 2
        print(f"indexer-lab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
