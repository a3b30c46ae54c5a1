"""``indexer-lab reproduce``: every public report the project holds (``data/field/``), reproduced
from its reporter's own settings (the release's defaults for the rest): the reported allocation,
the modelled one, the verdict and the assumptions it needed.  Modelled.

Exit status 0 when every report comes out as ``data/field/`` says it does (reproduced, or not
reproduced with the reason); 1 when one does not.
"""
from __future__ import annotations

import json

from ..presets import GIB
from .exits import epilog


def register(subparsers) -> None:
    what = "reproduce every public report of an indexer OOM the project holds, from its reporter's settings (modelled)"
    p = subparsers.add_parser("reproduce", help=what, description=what, epilog=epilog(
        "every report comes out as data/field/ says it does (reproduced, or not with the reason)",
        "a report no longer comes out as data/field/ says"))
    p.add_argument("--json", action="store_true", help="a JSON list, one object per report")
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args) -> int:
    from ..study.reported import public_reports

    rows = public_reports()
    as_expected = all(r["verdict"] == r["expected"] for r in rows)
    if args.json:
        print(json.dumps(rows))
        return 0 if as_expected else 1
    print(f"{len(rows)} public reports, each from its reporter's own settings (modelled):")
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':<{width}} {'reported':>10} {'modelled':>10}  {'verdict':<15} source")
    for r in rows:
        print(f"{r['case']:<{width}} {shown(r, 'reported'):>10} {shown(r, 'modelled'):>10}  {r['verdict']:<15} {r['source']}")
        for a in r["assumptions"]:
            print(f"{'':<{width}} assumption or reason: {a}")
    if not as_expected:
        print("a report no longer comes out as data/field/ says it does")
    return 0 if as_expected else 1


def shown(row: dict, which: str) -> str:
    """A report's figure in its unit: GiB, tokens or a verdict."""
    if row["unit"] == "bytes":
        return f"{row[which + '_bytes'] / GIB:.2f}Gi"
    value = row.get(which, row.get(f"{which}_bytes"))
    return f"{value / 1000:.1f}K tok" if row["unit"] == "tokens" else str(value)
