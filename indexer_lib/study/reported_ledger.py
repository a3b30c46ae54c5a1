"""The public reports of what the indexer reserves and how a run's memory ends, each reproduced
from its reporter's own flags through the ledger (``data/field/reported_ledger.csv``,
docs/design.md#the-ledger): a boot line (the K workspace, the profile run's reservation, the C4
logits a prefill CUDA graph captures, the decode logits vLLM's ROCm profile run puts in the
workspace), the prompt length from which a step passes the budget, a run's verdict, or whether the
release plans the model on the GPU at all (``GPU refusal``: the release's own reason, one line).

``reporter_rule`` names where the reporter's build differs from the release planned, as the
report itself quotes its code: ``workspace 40 x max_model_len`` (the K workspace before a
release sized it in pools), ``saved: decode at max_model_len`` (what sizing the decode
reservation in pools saved), ``chunk of N rows`` (the scheduler's chunk the report gives),
``decode rows: max_num_batched_tokens`` (a ROCm build whose profile run sized the decode logits
at max_num_batched_tokens rows), ``decode step of N requests`` (one decode step's logits), ``before the ROCm cap`` (a build whose
free-memory budget let one call pass aiter's buffer_store limit).
"""
from __future__ import annotations

from ..engines import (check_gpu, get_engine, gpu_refusal, process_budget, profile_run_logits_bytes,
                       release_scheduler, scheduler_gpu_defaults)
from ..ledger import boot_lines
from ..ledger.boot import prefill_graph_line, rocm_decode_workspace_bytes
from ..ledger.deployment import Server, deployment_ledger
from ..ledger.free import free_from_flags
from ..memory import make_plan, memory_report
from ..memory.replayed import workspace_path_bytes
from ..padding import unpadded_logits_bytes
from ..plan import PlanSettings
from ..presets import GIB, MIB, get_model
from ..refdata import number, read_rows
from ..workload import ClosedLoopWorkload, SchedulerConfig, StepBatch

LEDGER_FILE = ("field", "reported_ledger.csv")
TEXT = ("case", "line", "what", "model", "engine", "gpu", "expandable_segments", "workload", "reporter_rule", "unit",
        "published", "status", "source", "note")


def ledger_cases() -> list[dict]:
    return [{k: (v if k in TEXT else number(v)) for k, v in row.items()} for row in read_rows(*LEDGER_FILE)]


def _settings(case: dict) -> PlanSettings:
    return PlanSettings(case["model"], case["engine"], temporaries="deepgemm", gpu=case["gpu"])


def _workspace(case: dict) -> tuple[int, int]:
    """(the reporter's K workspace, the release's own at the same max_model_len), in bytes."""
    settings, mml = _settings(case), int(case["max_model_len"])
    model, profile = settings.preset, settings.profile
    if case["reporter_rule"] != "workspace 40 x max_model_len":
        raise ValueError(f"case {case['case']}: reporter_rule {case['reporter_rule']!r} is not a K workspace rule")
    theirs = workspace_path_bytes(profile, 40 * mml, model.head_dim, model.k_bytes_per_token - model.head_dim)
    own = settings.where(workspace_tokens=settings.workspace_at(mml))
    plan = make_plan(StepBatch.from_lengths([1], [1]), "engine", None, own)
    rows = case["max_num_batched_tokens"] or 8192
    (line,) = [x for x in boot_lines(plan, memory_report(plan, topk_rows=rows), mml) if x.name == "K workspace"]
    return theirs, line.bytes


def _decode_reservation_saved(case: dict) -> tuple[int, int]:
    """(what sizing the reservation in pools saved, the release's reservation), in bytes."""
    profile, model = get_engine(case["engine"]), get_model(case["model"])
    mml = int(case["max_model_len"])
    decodes = SchedulerConfig(max_num_batched_tokens=int(case["max_num_batched_tokens"]),
                              max_num_seqs=int(case["max_num_seqs"]),
                              speculative_tokens=int(case["speculative_tokens"] or 0)).most_decode_tokens
    own = profile_run_logits_bytes(profile, None, model, decodes, mml)
    before = profile_run_logits_bytes(profile, None, model, decodes, mml, decode_columns=mml)
    return before - own, own


def _rocm_decode_workspace(case: dict) -> tuple[int, int, str]:
    """(the decode logits the reporter's build asks the ROCm workspace for, what the release's
    profile run asks for at the report's flags, how many rows that is), in bytes."""
    settings = _settings(case)
    check_gpu(settings.profile, case["gpu"], settings.preset)
    mml, spec = int(case["max_model_len"]), int(case["speculative_tokens"] or 0)
    config = release_scheduler(settings.profile, settings.preset.kv_block, case["gpu"], **{
        k: int(case[k]) for k in ("max_num_batched_tokens", "max_num_seqs") if case[k] is not None},
        speculative_tokens=spec)
    rule = case["reporter_rule"]
    if rule == "decode rows: max_num_batched_tokens":
        rows = config.max_num_batched_tokens
    elif rule.startswith("decode step of ") and rule.endswith(" requests"):
        rows = int(rule.removeprefix("decode step of ").removesuffix(" requests")) * (1 + spec)
    else:
        raise ValueError(f"case {case['case']}: reporter_rule {rule!r} is not a ROCm decode rule")
    own = config.most_decode_tokens
    return (rocm_decode_workspace_bytes(settings, rows, mml),
            rocm_decode_workspace_bytes(settings, own, mml),
            f"{own:,} rows (min(max_num_batched_tokens {config.max_num_batched_tokens:,}, "
            f"max_num_seqs {config.max_num_seqs:,} x (1 + {spec})))")


def _refusal(case: dict) -> tuple[str, str]:
    """("refused" with the release's own reason, or "planned") for the report's model on its GPU."""
    why = gpu_refusal(case["engine"], case["gpu"], get_model(case["model"]))
    return ("planned", f"{case['engine']} plans {case['model']} on {case['gpu']}") if why is None else ("refused", why)


def _shortest(rows: int, high: int, past) -> int:
    """The shortest sequence in (rows, high] at which ``past(seq)`` holds for a step of ``rows``
    rows (``high`` where none does); ``past`` holds from some length on."""
    low = rows  # past(high), not past(low)
    if not past(high):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if past(mid) else (mid, high)
    return high


def _past_budget(case: dict) -> tuple[int, int]:
    """(the shortest sequence whose step of the report's chunk is cut in two, the chunk's rows)."""
    rows = int(case["reporter_rule"].removeprefix("chunk of ").removesuffix(" rows"))
    settings = _settings(case)
    budget = int(case["budget_mb"] or settings.profile.budget_default) * MIB

    def cut(seq: int) -> bool:
        return make_plan(StepBatch.from_lengths([rows], [seq]), "engine", budget, settings).num_chunks > 1

    return _shortest(rows, int(case["max_model_len"]), cut), rows


# aiter's fp8_mqa_logits takes its buffer_store path only below this many bytes of logits
# (aiter/ops/triton/attention/fp8_mqa_logits.py BUFFER_LIMIT_BYTES, as sgl-project/sglang#36960
# and ROCm/aiter#5114 quote it); at or above it the kernel fails to compile and aborts
AITER_BUFFER_STORE_LIMIT = 2 * 1024 ** 3


def _past_aiter_limit(case: dict) -> tuple[int, str]:
    """(the shortest sequence whose step of the release's default chunk asks aiter's
    fp8_mqa_logits for at least its buffer_store limit in one call, how the step is planned), on a
    build before the release's ROCm cap: its free-memory budget, uncapped."""
    settings = _settings(case)
    profile = settings.profile
    gpu = check_gpu(profile, case["gpu"], settings.preset)
    rows = int(case["max_num_batched_tokens"] or scheduler_gpu_defaults(profile, gpu)["max_num_batched_tokens"])
    free = free_from_flags(profile, gpu, 0)
    budget = process_budget(profile, free.bytes, gpu.capacity_bytes, rocm=False)

    def past(seq: int) -> bool:
        plan = make_plan(StepBatch.from_lengths([rows], [seq]), "engine", budget, settings)
        return max(unpadded_logits_bytes(c.num_rows, c.logits_cols) for c in plan.chunks) >= AITER_BUFFER_STORE_LIMIT

    return _shortest(rows, int(case["max_model_len"]), past), (
        f"steps of {rows:,} rows (the release's chunk on {gpu.name}) under its free-memory budget without the ROCm "
        f"cap, {budget:,} B at {free.bytes / GIB:.2f} GiB free ({free.source})")


def _workload(text: str) -> ClosedLoopWorkload:
    """``CONCURRENCYxISLxOSL``, as the table writes a workload."""
    concurrency, isl, osl = (int(v) for v in text.split("x"))
    return ClosedLoopWorkload(concurrency, isl, osl)


def _verdict(case: dict) -> tuple[str, str]:
    server = Server(case["model"], case["engine"], case["gpu"], int(case["tp"] or 1),
                    gpu_memory_utilization=case["gpu_memory_utilization"], max_model_len=int(case["max_model_len"]),
                    max_num_seqs=None if case["max_num_seqs"] is None else int(case["max_num_seqs"]),
                    max_num_batched_tokens=None if case["max_num_batched_tokens"] is None
                    else int(case["max_num_batched_tokens"]),
                    speculative_tokens=int(case["speculative_tokens"] or 0), budget_mb=case["budget_mb"],
                    expandable_segments=case["expandable_segments"] == "true")
    d = deployment_ledger(server, _workload(case["workload"]))
    oom = d.run.ledger.oom_line
    return d.run.ledger.verdict, (f"{oom.name}: {oom.detail}" if oom is not None else
                                  f"the most any line asks for: {d.run.ledger.needed_bytes:,} B")


def reproduce_ledger(case: dict) -> dict:
    """One report: the published figure, the modelled one, whether they match."""
    unit = case["unit"]
    extra = []
    if case["line"] == "K workspace":
        modelled, own = _workspace(case)
        extra.append(f"{case['engine']} sizes it at {own:,} B")
    elif case["line"] == "profile run's logits reservation":
        modelled, own = _decode_reservation_saved(case)
        extra.append(f"{case['engine']} reserves {own:,} B")
    elif case["line"] == "prefill step past the budget":
        modelled, rows = _past_budget(case)
    elif case["line"] == "prefill step past aiter's buffer_store limit":
        modelled, how = _past_aiter_limit(case)
        extra.append(how)
    elif case["line"] == "prefill CUDA graph's C4 logits":
        modelled = prefill_graph_line(_settings(case), int(case["max_num_batched_tokens"]), int(case["max_model_len"]),
                                      int(case["speculative_tokens"] or 0)).bytes
    elif case["line"] == "ROCm decode logits in the workspace":
        modelled, own, rows = _rocm_decode_workspace(case)
        extra.append(f"{case['engine']}'s profile run asks for {own:,} B: {rows}")
    elif case["line"] in ("verdict", "GPU refusal"):
        modelled, why = (_verdict if case["line"] == "verdict" else _refusal)(case)
        extra.append(why)
    else:
        raise ValueError(f"case {case['case']}: line {case['line']!r} is not one reproduce knows")
    if unit in ("verdict", "outcome"):
        published, difference, matches = case["published"], None, modelled == case["published"]
    else:
        published = int(float(case["published"]))
        difference = abs(modelled - published) / published
        matches = difference <= case["tolerance"]
    return {"case": case["case"], "source": case["source"], "what": case["what"], "engine": case["engine"],
            "counts": case["line"], "unit": unit,
            "reported_bytes": published if unit == "bytes" else None,
            "modelled_bytes": modelled if unit == "bytes" else None,
            "reported": published, "modelled": modelled, "relative_difference": difference,
            "tolerance": case["tolerance"], "verdict": "reproduced" if matches else "not reproduced",
            "expected": case["status"], "assumptions": [case["note"]] + extra}
