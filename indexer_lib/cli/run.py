"""``indexer-lab run``: execute one step's plan on tensors, per-chunk figures.

``--device meta`` traces (no memory, full-scale shapes in seconds) and reports
``peak_bytes_traced``; ``--device cuda`` measures ``peak_bytes_measured``;
``--device cpu`` computes for real (small steps).  The modelled peak is printed
next to either, for the same workspace size.
"""
from __future__ import annotations

import json
import sys

from .common import UsageError, add_batch_options, plan_from_args, verdict, verdict_code, verdict_line
from .exits import epilog
from ..presets import format_bytes


def register(subparsers) -> None:
    what = "execute one step batch's plan and print per-chunk figures"
    p = subparsers.add_parser("run", help=what, description=what,
                              epilog=epilog("the step ran and, with --free-gib, its modelled peak fits",
                                            "with --free-gib: the step runs out of memory (OOM, modelled)"))
    add_batch_options(p)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "meta"),
                   help="cpu: compute, cuda: measure, meta: trace without memory (default: %(default)s)")
    p.add_argument("--backend", default="reference", choices=("reference", "deepgemm"),
                   help="logits + top-k backend: reference or deepgemm (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="inputs are drawn from this seed (default: %(default)s)")
    p.add_argument("--topk", type=int, help="override the model's top-k (small experiments)")
    p.add_argument("--topk-rows", type=int, help="rows of the persistent top-k buffer (default: the step's)")
    p.add_argument("--save-topk", metavar="PATH", help="write the [M, topk] int32 indices as .npy")
    p.set_defaults(func=cmd_run)


def device_bytes(device: str) -> int:
    """What one allocation on the device can hold at most: the machine's memory (cpu), the
    GPU's (cuda), or what torch can size at all (meta)."""
    import os

    import torch

    if device == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return 1 << 62


def check_fits_device(plan, args) -> None:
    """UsageError, before any tensor, for a plan whose buffers the device cannot hold (a huge
    --workspace-tokens, --topk or --topk-rows)."""
    from ..memory import memory_report

    report = memory_report(plan, topk_rows=args.topk_rows, topk=args.topk, temporaries=None)
    limit = device_bytes(args.device)
    if report.peak > limit:
        raise UsageError(f"the plan needs {report.peak} bytes ({format_bytes(report.peak)}) on {args.device}, "
                         f"more than it holds ({format_bytes(limit)}): check --workspace-tokens, --topk "
                         "and --topk-rows")


class ChunkProgress:
    """A progress bar on stderr over a plan's chunks, weighted by their logits (a CPU run of a
    large step takes minutes): the executor reports each chunk's start and end."""

    def __init__(self, plan, device: str):
        from tqdm import tqdm

        self.weights = [max(1, c.logits_bytes) for c in plan.chunks]
        self.bar = tqdm(total=sum(self.weights), desc=f"logits of {plan.num_chunks} chunks on {device}", unit="B",
                        unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False, mininterval=0.5)
        self.bar.refresh()  # shown before the first chunk, which may be the only one

    def chunk_start(self, index: int) -> None:
        self.bar.set_postfix_str(f"chunk {index + 1}/{len(self.weights)}", refresh=True)

    def chunk_end(self, index: int, run) -> None:
        self.bar.update(self.weights[index])

    def close(self) -> None:
        self.bar.close()


def cmd_run(args) -> int:
    import numpy as np
    import torch

    from ..run.inputs import make_inputs
    from ..memory import memory_report
    from ..run.executor import execute
    from ..run.tracer import trace

    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: must be >= 0")
    if args.topk is not None and args.topk < 1:
        raise UsageError(f"--topk {args.topk}: must be >= 1")
    if args.save_topk and args.device == "meta":
        raise UsageError("--save-topk: the meta device computes no indices; use --device cpu or cuda")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here (torch.cuda.is_available() is False)")
    plan = plan_from_args(args)
    check_fits_device(plan, args)

    out = {"strategy": plan.strategy, "engine": plan.engine, "model": plan.model,
           "deepgemm_version": plan.deepgemm_version,
           "budget_bytes": plan.budget_bytes, "device": args.device, "backend": args.backend,
           "seed": args.seed, "num_chunks": plan.num_chunks}
    if args.device == "meta":
        traced = trace(plan, topk_rows=args.topk_rows, backend=args.backend, topk=args.topk)
        result = traced.execution
        out["peak_bytes_traced"] = traced.peak_bytes
    else:
        inputs = make_inputs(plan.batch, plan.model, seed=args.seed, device=args.device)
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        progress = ChunkProgress(plan, args.device)
        try:
            result = execute(plan, inputs, backend=args.backend, topk=args.topk, topk_rows=args.topk_rows,
                             observer=progress)
        finally:
            progress.close()
        if args.device == "cuda":
            # the call's own peak: what was allocated beyond the inputs
            out["peak_bytes_measured"] = torch.cuda.max_memory_allocated() - before
    report = memory_report(plan, topk_rows=args.topk_rows, topk=result.topk,
                           workspace_tokens=result.workspace_tokens, temporaries=args.backend)
    # the verdict holds the modelled transient peak against the memory free when the step runs
    v = verdict(plan, args, report)
    out.update(v.to_json())
    out.update(peak_bytes_model=report.peak, workspace_tokens=result.workspace_tokens,
               topk=result.topk, seconds=result.seconds, chunks=[c.to_json() for c in result.chunks])
    if args.save_topk:
        np.save(args.save_topk, result.indices.cpu().numpy())
        out["saved_topk"] = args.save_topk

    if args.json:
        print(json.dumps(out))
        return verdict_code(v)
    print(f"{plan.strategy} on {plan.engine}, {plan.model}, {args.device} ({args.backend}): {plan.num_chunks} chunks, "
          f"{result.seconds * 1e3:.1f} ms, workspace {result.workspace_tokens} tokens")
    print(f"{'#':>4} {'rows':>7} {'width':>8} {'kv':>8} {'gather':>6} {'logits':>11} "
          f"{'metadata':>10} {'ms':>9}" + (f" {'traced peak':>12}" if args.device == "meta" else ""))
    for c in result.chunks:
        line = (f"{c.index:>4} {c.rows:>7} {c.width:>8} {c.kv_tokens:>8} {'yes' if c.gather else 'no':>6} "
                f"{format_bytes(c.logits_bytes):>11} {format_bytes(c.metadata_bytes):>10} "
                f"{c.seconds * 1e3:>9.2f}")
        if c.traced_peak is not None:
            line += f" {format_bytes(c.traced_peak):>12}"
        print(line)
    for key in ("peak_bytes_traced", "peak_bytes_measured"):
        if key in out:
            print(f"{key}: {out[key]} ({format_bytes(out[key])})")
    print(f"peak_bytes_model: {report.peak} ({format_bytes(report.peak)})")
    line = verdict_line(v)
    if line:
        print(line)
    if args.save_topk:
        print(f"top-k indices -> {args.save_topk}")
    return verdict_code(v)
