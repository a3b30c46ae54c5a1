"""The failures reported in the field, reproduced by the model, and named steps.

The published allocations, with the shapes and settings that produced them and
their sources, are ``data/field/reported_allocations.csv``: GLM-5 at concurrency
48-64 x ISL 10240 without a logits budget (~9.89 GiB), one 64K prompt in one step
(16 GiB), a 64K prompt with ``--max-num-batched-tokens 32768`` under DeepGEMM
2.1's padding (8.03 GiB), SGLang's DeepSeek-V4 allocations through its C4 indexer's own path
(4,096 rows x 93,184 compressed columns, 1.42 GiB, and its 3.05 GiB, ~8 GiB and 9 GiB calls at
longer contexts and larger chunks), TensorRT-LLM's ~16 GB for a ~500K-token DeepSeek-V4 prompt at its
32K-row indexer chunk, and its ~18-22 GB at ``max_num_tokens=8192`` (not reproduced: the report
gives no requests), and GLM-5.3-Flash's kpool indexer on SGLang: 8,192 rows x 348k pooled entries
(10.62 GiB) and the 73.65 GiB on 4 x B300 (not reproduced: the report gives no requests, and one
request gives 16 GiB at the default chunk).  A ``workload`` case is simulated and its
worst step planned without a budget; a ``shape`` case is one logits allocation
of the given rows and columns (with an SGLang release that models the model's compressed K: one
call of the rows at ``isl`` tokens through the release's own path) (docs/design.md#reference-data).
"""
from __future__ import annotations

from ..search.worst_step import Schedule, prefill_batches, worst_step
from .releases import deployment_scheduler
from ..engines import EngineBudget, get_engine, process_budget, release_scheduler
from ..padding import get_rules, unpadded_logits_bytes
from ..plan import PlanSettings
from ..memory import make_plan
from ..refdata import number, read_rows
from ..presets import GIB, MIB, get_model
from ..workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch

REPORTED_FILE = ("field", "reported_allocations.csv")


def published_cases() -> list[dict]:
    """The published allocations, one dict per case, numbers parsed."""
    text = ("case", "kind", "what", "model", "engine", "warm_cache", "layout", "deepgemm_version", "counts", "status",
            "source", "note")
    return [{k: (v if k in text else number(v)) for k, v in row.items()} for row in read_rows(*REPORTED_FILE)]


def case_workload(case: dict) -> ClosedLoopWorkload:
    """A workload case's closed loop; ``warm_cache``: every prompt in the prefix cache before the run."""
    return ClosedLoopWorkload(case["concurrency"], case["isl"], case["osl"], warm_cache=case["warm_cache"] == "true")


def case_scheduler(case: dict) -> SchedulerConfig:
    """A workload case's scheduler: the settings its reporter gave, the reporter's release's
    defaults for the rest."""
    return release_scheduler(case["engine"], get_model(case["model"]).kv_block, **deployment_scheduler(case))


def _largest_logits(case: dict) -> tuple[int, int, int]:
    """(rows, columns, allocated bytes) of the case's largest logits allocation."""
    version = case["deepgemm_version"]
    if case["kind"] == "shape" and case["engine"] and _on_release_path(case):
        # one call of the reported rows through the release's own path for the model's indexer:
        # one request at ``isl`` tokens (default: the columns' tokens, cols x the compress ratio),
        # no budget, so the rows are the allocation's as the report gives them
        model = get_model(case["model"])
        tokens = case["isl"] or case["cols"] * model.kv_ratio
        batch = StepBatch.from_lengths([case["rows"]], [tokens])
        plan = make_plan(batch, "engine", None, PlanSettings(case["model"], case["engine"], temporaries="deepgemm"))
        chunk = max(plan.chunks, key=lambda c: c.logits_bytes)
        return chunk.num_rows, chunk.logits_cols, chunk.logits_bytes
    if case["kind"] == "shape":
        compressed = case["layout"] == "compressed"
        allocated = get_rules(version).logits_bytes(case["rows"], case["cols"], case["index_heads"], compressed)
        return case["rows"], case["cols"], allocated
    if case["kind"] != "workload":
        raise ValueError(f"case {case['case']!r}: kind {case['kind']!r} must be 'workload' or 'shape'")
    model = case["model"]
    workload = case_workload(case)
    config = case_scheduler(case)
    schedule = Schedule(prefill_batches(workload, config))
    if get_engine(case["engine"]).chunker == "tokens":
        # TensorRT-LLM chunks a step's rows even without a budget: its own chunker, on its own build
        strategy, settings = "engine", PlanSettings(model, case["engine"], temporaries="deepgemm")
    else:
        # the vLLM releases reported had no budget: every request's K in one chunk
        strategy, settings = "n-only", PlanSettings(model, deepgemm_version=version, temporaries="deepgemm")
    w = worst_step(schedule, strategy, None, settings, topk_rows=config.max_num_batched_tokens)
    plan = make_plan(schedule.step(w.worst_step), strategy, None, settings)
    chunk = max(plan.chunks, key=lambda c: c.logits_bytes)
    return chunk.num_rows, chunk.logits_cols, chunk.logits_bytes


def _on_release_path(case: dict) -> bool:
    """Whether a shape case goes through its release's own path: SGLang's for compressed K
    (DeepSeek-V4's C4 indexer, GLM-5.3-Flash's kpool), where the release's profile models it."""
    engine = get_engine(case["engine"])
    return engine.engine == "sglang" and engine.compressed_kv and get_model(case["model"]).kv_ratio != 1


def reproduce(case: dict) -> dict:
    """What the model reproduces for one published case, next to the published GiB."""
    rows, cols, allocated = _largest_logits(case)
    gib = {"unpadded_gib": unpadded_logits_bytes(rows, cols) / GIB, "allocated_gib": allocated / GIB}
    published, tolerance, counted = case["published_gib"], case["tolerance"], case["counts"]
    error = abs(gib[counted] - published) / published
    return {
        "case": case["case"], "what": case["what"], "model": case["model"],
        "deepgemm_version": case["deepgemm_version"], "concurrency": case["concurrency"],
        "isl": case["isl"], "max_num_batched_tokens": case["max_num_batched_tokens"],
        "rows": rows, "kv_tokens": cols, **gib,
        "reproduced_gib": gib[counted], "published_gib": published, "relative_error": error,
        "tolerance": tolerance, "matches": error <= tolerance, "expected": case["status"],
        "source": "modelled", "published_source": case["source"], "note": case["note"],
    }


def reproductions():
    """One row per reported failure: what the model reproduces, next to the published GiB."""
    import pandas as pd

    return pd.DataFrame([reproduce(case) for case in published_cases()])


def public_reports(reproduced: list[dict] | None = None) -> list[dict]:
    """Every public report the project holds, reproduced from its reporter's own settings: one
    dict per report with its source, what, reported and modelled bytes, the verdict, the verdict
    ``data/field/`` expects, and the assumptions it needed (``indexer-lab reproduce``).
    ``reproduced``: the cases' ``reproduce`` rows where they are at hand (not simulated again)."""
    rows = []
    cases = published_cases()
    for case, r in zip(cases, reproduced or [reproduce(case) for case in cases], strict=True):
        verdict = "reproduced" if r["matches"] else "not reproduced"
        assumptions = [case["note"]] if case["note"] else []
        rows.append({"case": r["case"], "source": r["published_source"], "what": r["what"],
                     "engine": case["engine"] or None, "counts": case["counts"],
                     "reported_bytes": round(r["published_gib"] * GIB), "modelled_bytes": round(r["reproduced_gib"] * GIB),
                     "relative_difference": r["relative_error"], "tolerance": r["tolerance"],
                     "verdict": verdict, "expected": case["status"], "assumptions": assumptions})
    for s in stale_budgets():
        # the engine lets the chunk through under the budget it cached, and the chunk does not fit
        reproduced = s["engine_allows_the_chunk"] and not s["chunk_fits_free_memory"]
        rows.append({"case": s["case"], "source": s["source"].removeprefix("modelled from "),
                     "what": f"{s['engine']}'s cached logits budget lets a {s['asked_gib']:.2f} GiB chunk through "
                             f"with {s['free_gib']:.2f} GiB free",
                     "engine": s["engine"], "counts": "budget",
                     "reported_bytes": round(s["asked_gib"] * GIB), "modelled_bytes": round(s["cached_budget_gib"] * GIB),
                     "relative_difference": None, "tolerance": None,
                     "verdict": "reproduced" if reproduced else "not reproduced", "expected": "reproduced",
                     "assumptions": ["the first free-memory reading (20 GiB) is assumed: the report does not give it"]})
    for row in rows:
        row.setdefault("unit", "bytes")
    from .reported_ledger import ledger_cases, reproduce_ledger  # the ledger's reports: boot, budget, run

    rows += [reproduce_ledger(case) for case in ledger_cases()]
    return rows


# before the logits budget, its first release, the latest; TensorRT-LLM before its adaptive
# chunk and element cap, and its latest
FIELD_RELEASES = ("vllm==0.15.1", "vllm==0.19.0", "vllm==0.33.0", "trtllm==1.3.0rc15.post1", "trtllm==1.4.0rc4")


def through_releases(releases=FIELD_RELEASES):
    """The reported workloads, planned by each release of the reporter's engine (among
    ``releases``) with its own chunker at its default budget: the largest logits allocation over
    the schedule and the worst step's transient peak.  Releases without a budget reproduce the
    published allocation; later ones bound it."""
    import pandas as pd

    rows = []
    for case in published_cases():
        if case["kind"] != "workload":
            continue
        family = get_engine(case["engine"]).engine
        model = case["model"]
        workload = case_workload(case)
        config = case_scheduler(case)
        mnbt = config.max_num_batched_tokens
        schedule = Schedule(prefill_batches(workload, config))
        unbudgeted = None
        for name in releases:
            engine = get_engine(name)
            if engine.engine != family:
                continue
            budget = process_budget(engine)
            settings = PlanSettings(model, engine, temporaries="deepgemm")
            worst = worst_step(schedule, "engine", budget, settings, topk_rows=mnbt)
            plan = make_plan(schedule.step(worst.worst_step), "engine", budget, settings)
            chunk = max(plan.chunks, key=lambda c: c.logits_bytes)
            gib = {"unpadded_gib": unpadded_logits_bytes(chunk.num_rows, chunk.logits_cols) / GIB,
                   "allocated_gib": chunk.logits_bytes / GIB}
            if not engine.has_budget and unbudgeted is None:
                unbudgeted = chunk.logits_bytes
            reproduces = None
            if not engine.has_budget:
                error = abs(gib[case["counts"]] - case["published_gib"]) / case["published_gib"]
                reproduces = error <= case["tolerance"]
            rows.append({
                "case": case["case"], "engine": name, "deepgemm_rules": engine.deepgemm_rules,
                "layout": engine.layout, "budget_mib": None if budget is None else budget / MIB,
                "worst_step_chunks": worst.worst_chunks, "largest_logits_rows": chunk.num_rows,
                "largest_logits_cols": chunk.logits_cols, "largest_logits_bytes": chunk.logits_bytes,
                "largest_logits_gib": chunk.logits_bytes / GIB,
                "peak_transient_gib": worst.peak_transient_bytes / GIB,
                "published_gib": case["published_gib"], "reproduces_published": reproduces,
                "vs_unbudgeted": None if unbudgeted is None else chunk.logits_bytes / unbudgeted,
                "source": "modelled",
            })
    return pd.DataFrame(rows)


def stale_budget_cases() -> dict[str, dict]:
    """The reported stale-budget cases (``data/field/reported_budgets.csv``) by name: the
    reporter's engine, GPU total, fraction and ``--mem-fraction-static``, and the free memory at
    the first measured call and at the failure, in bytes."""
    return {r["case"]: {"engine": get_engine(r["engine"]).name, "total_bytes": int(float(r["total_gib"]) * GIB),
                        "fraction": float(r["fraction"]), "mem_fraction_static": float(r["mem_fraction_static"]),
                        "first_free_bytes": int(float(r["first_free_gib"]) * GIB),
                        "free_bytes": int(float(r["free_gib"]) * GIB), "row": r}
            for r in read_rows("field", "reported_budgets.csv")}


def stale_budgets() -> list[dict]:
    """The reported stale SGLang budget, by its own rule: the budget measured with the first
    free-memory reading, what a fresh reading at the failure would have given, and whether
    the engine lets the failing chunk through."""
    out = []
    for case in stale_budget_cases().values():
        r, engine = case["row"], get_engine(case["engine"])
        args = dict(value=case["fraction"], total_bytes=case["total_bytes"],
                    mem_fraction_static=case["mem_fraction_static"])
        process = EngineBudget(engine, **args)
        gate = engine.chunk_skip_elements or 1
        cached = process.for_call(gate, 1, case["first_free_bytes"])
        at_failure = process.for_call(gate, 1, case["free_bytes"])
        fresh = EngineBudget(engine, **args).for_call(gate, 1, case["free_bytes"])
        asked = float(r["asked_gib"]) * GIB
        out.append({"case": r["case"], "engine": engine.name, "cached_budget_gib": cached / GIB,
                    "budget_at_failure_gib": at_failure / GIB, "fresh_budget_gib": fresh / GIB,
                    "asked_gib": asked / GIB, "free_gib": float(r["free_gib"]),
                    "engine_allows_the_chunk": asked <= at_failure,
                    "chunk_fits_free_memory": asked <= case["free_bytes"],
                    "fresh_budget_would_fit": fresh <= case["free_bytes"],
                    "source": f"modelled from {r['source']}"})
    return out


def named_steps() -> dict[str, StepBatch]:
    """Typical and extreme prefill steps, each a single engine step."""
    return {
        # typical: 8 fresh 1K prompts in one 8K-token step
        "typical: 8 x 1K fresh prompts": StepBatch(tuple(PrefillRequest(0, 1024) for _ in range(8))),
        # typical chunked prefill: one 32K prompt's 3rd 8K chunk
        "typical: 8K chunk at 16K context": StepBatch((PrefillRequest(16384, 8192),)),
        # the reported OOM: 32 partial prefills of 10K prompts, 256 new tokens each
        "extreme: 32 x (9984 + 256), a reported OOM's shape": StepBatch(
            tuple(PrefillRequest(9984, 256) for _ in range(32))),
        # one 64K prompt in one step
        "extreme: one 64K prompt": StepBatch((PrefillRequest(0, 65536),)),
        # ATOM's shared prefix: ~111K cached + 3.5K new, two requests of a step
        "extreme: 2 x (111K prefix + 3.5K)": StepBatch(
            tuple(PrefillRequest(111 * 1024, 3584) for _ in range(2))),
    }
