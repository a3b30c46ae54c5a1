"""``indexer-lab`` command line: one module per subcommand (``plan``, ``time``, ``frontier``,
``run``, ``auto``, ``deploy``, ``replay``, ``reproduce``, ``app``), each adding its parser with
``register(subparsers)``.

Every subcommand ends with the same exit statuses (``exits``): bad input is one line naming the
value and the rule, exit status 2; Ctrl-C one line saying what was kept, exit status 130; a reader
that closes the pipe early ends it quietly.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from ..presets import DEFAULT_MODEL
from . import app, auto, deploy, exits, frontier, plan, replay, reproduce, run, time

SUBCOMMANDS = (plan, time, frontier, run, auto, deploy, replay, reproduce, app)

DESCRIPTION = f"""\
Where does the sparse-attention indexer of DeepSeek-V3.2, GLM-5 and their kin run out of GPU
memory in prefill, and what does each way of chunking its [query rows x KV tokens] fp32 logits
cost? indexer-lab models each engine release's own chunker (vLLM, SGLang, TensorRT-LLM) and the
project's strategies, DeepGEMM's padding included: one step (plan, time, run, replay), a grid of
workloads (frontier), the setting of a release's knob that never runs out of memory (auto), the
public reports of indexer OOMs (reproduce), and the dashboards as a web app (app). Every number is
modelled unless the output says it was measured or replayed. Without --model and --engine a
subcommand plans {DEFAULT_MODEL} on the latest vLLM."""

EPILOG = exits.SUMMARY + """

Each subcommand's --help lists its options and their defaults. README.md in the repository shows
examples, and docs/design.md how each number is modelled."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (no usage block), exit 2; descriptions
    and epilogs keep their lines."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(exits.BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="indexer-lab", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed one usage line
        return int(e.code or 0)
    except KeyboardInterrupt:
        return interrupted("")
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        # the reader stopped reading (``indexer-lab plan ... | head -1``): end quietly, as a
        # shell tool does, with nothing left to flush into the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exits.DONE
    except ValueError as e:  # UsageError and the library's ValueErrors: one line, exit 2
        print(f"indexer-lab {args.command}: error: {e}", file=sys.stderr)
        return exits.BAD_INPUT
    except KeyboardInterrupt as e:  # Ctrl-C: one line (what was kept, where the command says)
        return interrupted(f" {args.command}", str(e))
    except OSError as e:  # the machine refused (a full disk, a file removed meanwhile): one line
        print(f"indexer-lab {args.command}: failed: {e}", file=sys.stderr)
        return exits.FAILED
    except Exception:  # a bug: its traceback, and a status no verdict uses (1 would read as OOM)
        traceback.print_exc()
        print(f"indexer-lab {args.command}: failed (the traceback above says where)", file=sys.stderr)
        return exits.FAILED


def interrupted(command: str, kept: str = "") -> int:
    print(f"indexer-lab{command}: interrupted" + (f": {kept}" if kept else ""), file=sys.stderr)
    return exits.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
