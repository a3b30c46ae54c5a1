"""The device check's driver: runs the stages in order, each bounded in time and
isolated (a stage that fails is recorded with its error and the next one runs),
writes ``h200_check.json`` after every stage and one CSV per stage, and prints a
short table last.  ``python -m indexer_lib.cli.devicecheck`` runs ``main``."""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shlex
import sys
import time
import traceback
from pathlib import Path

import torch

from ...presets import GIB
from .common import Clock, Context, StageTimeout, free_cached
from .config import STAGES, Config, dry_run_config, h200_config
from .correctness import stage_correctness
from .frontier import stage_frontier
from .memory import stage_memory
from .probe import stage_probe
from .provenance import provenance
from .reserved import RESERVED_STRATEGIES, stage_reserved
from .timing import stage_timing

STAGE_FUNCS = {"probe": stage_probe, "correctness": stage_correctness, "memory": stage_memory,
               "timing": stage_timing, "frontier": stage_frontier, "reserved": stage_reserved}


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys or ["status"])
        writer.writeheader()
        for r in rows:
            writer.writerow(r)


def make_backend(cfg: Config, name: str | None):
    from ...run.kernels import get_backend

    name = name or ("reference" if cfg.dry_run else "deepgemm")
    return get_backend(name)


def run(cfg: Config, out: Path, backend_name: str | None = None, stages=STAGES,
        seed: int | None = None, command: str = "", total_seconds: float | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 2**31)
    summary = {"mode": "dry-run" if cfg.dry_run else "measure", "seed": seed, "stages": {}}
    try:
        backend = make_backend(cfg, backend_name)
    except Exception as e:  # nothing can run without a backend: say why and stop
        summary["provenance"] = {"command": command, "error": f"{type(e).__name__}: {e}"}
        summary["stages"] = {s: {"status": "not run: no backend"} for s in stages}
        (out / "h200_check.json").write_text(json.dumps(summary, indent=2, default=str))
        print(f"h200_check: no backend: {e}", file=sys.stderr)
        return summary
    summary["provenance"] = provenance(backend, command)
    ctx = Context(cfg, backend, cfg.device, seed)
    end = time.monotonic() + (cfg.total_seconds if total_seconds is None else total_seconds)
    for stage in stages:
        # a stage gets its own limit, but never time that the run as a whole does not have
        ctx.clock = Clock(min(cfg.stage_seconds.get(stage, 60), end - time.monotonic()))
        t0 = time.monotonic()
        status, rows, error, stop = "ok", [], None, False
        print(f"[h200_check] stage {stage} ...", flush=True)
        try:
            rows = STAGE_FUNCS[stage](ctx)
        except StageTimeout:
            status = "partial: stage time limit reached"
        except KeyboardInterrupt:  # the shell script's hard timeout: keep what was measured
            status = "interrupted: run time limit reached"
            stop = True
        except Exception as e:
            status = f"failed: {type(e).__name__}: {e}"
            error = traceback.format_exc(limit=6)
        finally:
            free_cached(cfg.device)
        bad = [r for r in rows if not str(r.get("status", "ok")).startswith(("ok", "skipped"))]
        if status == "ok" and bad:
            status = f"ok with {len(bad)} flagged rows"
        info = {"status": status, "seconds": round(time.monotonic() - t0, 2), "rows": len(rows)}
        if error:
            info["traceback"] = error
        summary["stages"][stage] = info
        _write_csv(out / f"{stage}.csv", rows)
        summary.setdefault("results", {})[stage] = rows
        print(f"[h200_check] stage {stage}: {status} ({info['seconds']} s)", flush=True)
        # written after every stage: a run cut short still leaves what it measured
        (out / "h200_check.json").write_text(json.dumps(summary, indent=2, default=str))
        if stop:
            break
    print(table(summary))
    return summary


def _fmt_bytes(b) -> str:
    return "-" if b is None or b == "" else f"{int(b) / GIB:.3f}"


def table(summary: dict) -> str:
    """The short table printed last (the reply carries the end of the output)."""
    lines = [f"h200_check {summary['mode']}  seed {summary['seed']}  "
             f"gpu {summary['provenance'].get('gpu')}  torch {summary['provenance'].get('torch')}  "
             f"rules {summary['provenance'].get('deepgemm_rules')}"]
    for stage, info in summary["stages"].items():
        lines.append(f"  {stage:<12} {info['status']} ({info.get('seconds', '-')} s, {info.get('rows', 0)} rows)")
    res = summary.get("results", {})
    for r in res.get("correctness", []):
        lines.append(f"  correct {r['shape']:<26} {r['layout']:<10} rel {r['rel_diff']:.2e} "
                     f"sets {r['topk_rows_equal_sets']}/{r['topk_rows']} same-logits-topk "
                     f"{r['gpu_topk_equals_reference_topk']}")
    for r in res.get("memory", []):
        lines.append(f"  memory  {r['step']:<26} {r['strategy']:<11} chunks {r.get('chunks', '-')!s:>4} "
                     f"pred {_fmt_bytes(r.get('predicted_peak'))} GiB meas {_fmt_bytes(r.get('measured_peak'))} GiB"
                     f"  {r['status'][:40]}")
    for r in res.get("timing", []):
        lines.append(f"  time    {r['step']:<26} {r['strategy']:<11} {r['budget_mib']!s:>6} MiB "
                     f"chunks {r.get('chunks', '-')!s:>4} median {r.get('median_ms', '-')} ms")
    for r in res.get("frontier", []):
        lines.append(f"  oom     {r['step']:<26} {r['strategy']:<11} free {r['free_gib']} GiB "
                     f"pred {'fits' if r.get('predicted_fits') else 'OOM'} meas {r.get('measured')}")
    rs = res.get("reserved", [])
    if rs and rs[-1].get("reserved") is not None:
        lines.append(f"  reserved after {len(rs)} slices: {_fmt_bytes(rs[-1]['reserved'])} GiB, "
                     f"segments {rs[-1]['segments']}")
    if rs:
        for strategy in RESERVED_STRATEGIES:
            col = strategy.replace("-", "_")
            last = rs[-1]
            if last.get(f"measured_reserved_{col}") is not None:  # the dry run predicts only
                lines.append(f"  reserved {strategy:<11} after {len(rs)} slices: predicted "
                             f"{_fmt_bytes(last[f'predicted_reserved_{col}'])} GiB, measured "
                             f"{_fmt_bytes(last.get(f'measured_reserved_{col}'))} GiB (above baseline)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m indexer_lib.cli.devicecheck", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "results/h200_check",
                   help="folder for h200_check.json and the stage CSVs (default: $OUT)")
    p.add_argument("--dry-run", action="store_true", help="reference backend on the CPU, tiny shapes")
    p.add_argument("--backend", default=None, help="backend name (default: deepgemm; reference with --dry-run)")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    p.add_argument("--seed", type=int, default=None, help="input seed (default: fresh)")
    p.add_argument("--total-seconds", type=float, default=None,
                   help="time for all stages together (default: 390 on the GPU, 300 for --dry-run)")
    args = p.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        p.error(f"unknown stage(s) {unknown}: choose from {', '.join(STAGES)}")
    cfg = dry_run_config() if args.dry_run else h200_config()
    if not cfg.dry_run and not torch.cuda.is_available():
        p.error("no CUDA device: run on the H200, or pass --dry-run")
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "indexer_lib.cli.devicecheck",
                                               *(argv if argv is not None else sys.argv[1:])])
    summary = run(cfg, Path(args.out), args.backend, stages, args.seed, command, args.total_seconds)
    failed = [s for s, i in summary["stages"].items() if not i["status"].startswith(("ok", "partial"))]
    return 1 if failed or "error" in summary["provenance"] else 0


if __name__ == "__main__":
    sys.exit(main())
