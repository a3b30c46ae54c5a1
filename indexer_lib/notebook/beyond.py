"""What notebook 04 shows, as functions: the strategies beyond the field against the
field's, the free-memory budget policies on a shrinking schedule, and ``auto`` for
a few deployments.  Every number is modelled (memory model, time model).
"""
from __future__ import annotations

from dataclasses import asdict, replace

from ..engines import DEFAULT_ENGINE, get_engine, not_default_text, release_scheduler
from ..study.auto import choose, engine_candidates, evaluate_candidates, mix_decode_bytes
from ..study.budget_policy import FixedPolicy, FreshPolicy, SglangPolicy, run_policy, shrinking_free_memory
from ..search.worst_step import Schedule
from ..memory import memory_report, plan_at
from ..plan import MEASURED_BUDGET, PlanSettings, get_strategy
from ..presets import GIB, MIB, free_bytes_from_gib
from ..timemodel.model import TimeModel, plan_features
from ..workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch

# the reported OOM step: 32 partial prefills of 10K prompts, 256 new tokens each
REPORTED_STEP = StepBatch(tuple(PrefillRequest(9984, 256) for _ in range(32)))

# deployments for auto: name -> (workload mix, free GiB); realistic shapes (docs/design.md#the-scheduler-that-produces-the-batches)
DEPLOYMENTS = {
    "chat: 64 x 10K prompts": ([ClosedLoopWorkload(64, 10_240, 512)], 2.63),
    "long context: 8 x 64K + 64 x 10K": ([ClosedLoopWorkload(8, 65_536, 64),
                                          ClosedLoopWorkload(64, 10_240, 512)], 2.63),
    # one schedule: the long prompts share steps with the short ones (ceil(1% x 128) = 2 of them)
    "chat, long tail: 64 x 2K, 1% at 128K": ([ClosedLoopWorkload(64, 2_048, 512, mix="0.01x131072")], 2.63),
    "RAG: 16 x 32K, 24K shared prefix": ([ClosedLoopWorkload(16, 32_768, 256, 24_576)], 4.0),
    "tight: 4 x 128K on 1 GiB free": ([ClosedLoopWorkload(4, 131_072, 64)], 1.0),
}


def chunk_table(steps: dict, strategies, budgets_mb, settings: PlanSettings, time_model: TimeModel | None = None):
    """Per step x strategy x budget: chunks, over-budget flag, worst-chunk peak (the H200 path's
    temporaries), allocated vs useful logits, modelled time."""
    import pandas as pd

    tm = (time_model or TimeModel.published()).for_gpu(settings.gpu)
    rows = []
    for name, batch in steps.items():
        for s in strategies:
            for mb in budgets_mb:
                plan = plan_at(batch, s, mb, settings)
                f = plan_features(plan)
                rows.append({"step": name, "strategy": s, "engine": plan.engine or "",
                             "deepgemm_version": plan.deepgemm_version, "budget_mb": mb,
                             "chunks": plan.num_chunks,
                             "over_budget": plan.over_budget,
                             "peak_transient_bytes": memory_report(plan, temporaries="deepgemm").peak_transient,
                             "allocated_logits_bytes": f["allocated_logits_bytes"],
                             "useful_logits_bytes": f["useful_logits_bytes"],
                             "gathers": f["gathers"], "time_ms": tm.features_ms(f),
                             "mode": "model", "time_source": tm.source})
    return pd.DataFrame(rows)


def policy_table(free_start_gib: float | None = None, free_end_gib: float | None = None, steps: int = 6,
                 strategy: str = "vllm", model: str = "glm-5", batch: StepBatch = REPORTED_STEP,
                 fixed_mb: float = 512, case: str = "sglang-stale-budget"):
    """The reported step repeated while free memory falls linearly from the first reading to
    the failure's (vLLM and SGLang allocate their KV pool up front, so this is not the KV cache
    filling: the fall is the report's, its cause not modelled): per policy and step, the budget it
    authorises and whether the plan fits.  SGLang's cached reading is its own rule with the
    reporter's flags (``case`` in data/field/reported_budgets.csv: its GPU's total,
    ``--mem-fraction-static``, the fraction), measured at the first reading and kept for the run;
    the readings are the report's unless given.  Ours re-reads and counts every transient."""
    import pandas as pd

    from ..study.reported import stale_budget_cases

    report = stale_budget_cases()[case]
    start = report["first_free_bytes"] if free_start_gib is None else free_bytes_from_gib(free_start_gib)
    end = report["free_bytes"] if free_end_gib is None else free_bytes_from_gib(free_end_gib)
    free = shrinking_free_memory(steps, start, end)
    sglang = SglangPolicy(report["total_bytes"], report["fraction"], report["mem_fraction_static"],
                          engine=report["engine"])
    policies = [FixedPolicy(fixed_mb), sglang, FreshPolicy()]
    rows = []
    for policy in policies:
        for step, r in enumerate(run_policy([batch] * steps, free, policy, strategy, PlanSettings(model))):
            row = asdict(r)
            row.update(step=step, policy=policy.name, strategy=strategy, mode="model")
            rows.append(row)
    return pd.DataFrame(rows)


def policy_sentence(table) -> str:
    """One line: where the cached reading fails and what the fresh policy does there."""
    bad = table[(table["policy"] == "sglang-cached") & ~table["fits"]]
    fresh = table[table["policy"] == "fresh"]
    if bad.empty:
        return "The cached reading never authorised a chunk that does not fit here (modelled)."
    r = bad.iloc[0]
    f = fresh[fresh["step"] == r["step"]].iloc[0]
    return (f"Step {r['step']}: SGLang's cached reading authorises {r['budget_bytes'] / GIB:.2f} GiB "
            f"with {r['free_bytes'] / GIB:.2f} GiB free: its plan needs {r['peak_transient_bytes'] / GIB:.2f} GiB "
            f"(OOM). The fresh policy authorises {f['budget_bytes'] / GIB:.2f} GiB there, needs "
            f"{f['peak_transient_bytes'] / GIB:.2f} GiB in {f['num_chunks']} chunks and fits "
            f"every step (modelled).")


# auto's candidates count the H200 path's temporaries, as the frontier does, on the latest vLLM
AUTO_SETTINGS = PlanSettings("glm-5", DEFAULT_ENGINE, temporaries="deepgemm")


class AutoDeployments:
    """auto's candidates per deployment, evaluated once: the project's strategies and, where
    the release's budget does not move with free memory, its own knob; ``recommend(name,
    free_gib)`` then only filters by free memory (instant, for widgets).  SGLang's own budget is
    measured from the memory free, so its candidates are evaluated per free value, then kept."""

    def __init__(self, deployments: dict | None = None, settings: PlanSettings = AUTO_SETTINGS,
                 budgets_mb=(64, 128, 256, 512, 1024, 2048), strategies=None,
                 scheduler: SchedulerConfig | None = None, time_model: TimeModel | None = None):
        self.deployments = deployments or DEPLOYMENTS
        self.settings, self.engine, self.model = settings, settings.engine, settings.model
        self.tm = (time_model or TimeModel.published()).for_gpu(settings.gpu)
        self.budgets_mb = tuple(budgets_mb)
        # to evaluate the same deployments on another engine release (``on_engine``): a scheduler
        # given stays, the default one is that release's own
        self.options = dict(deployments=self.deployments, budgets_mb=self.budgets_mb,
                            strategies=strategies, scheduler=scheduler, time_model=self.tm)
        scheduler = scheduler or release_scheduler(settings.profile, settings.preset.kv_block)
        self.scheduler = scheduler
        self.schedules = {name: [Schedule.of(w, scheduler) for w in mix]
                          for name, (mix, _) in self.deployments.items()}
        self.patched = {name: evaluate_candidates(schedules, settings, strategies, self.budgets_mb, self.tm)
                        for name, schedules in self.schedules.items()}
        self.own = {}  # (deployment, free GiB or None where free memory does not move it) -> candidates
        self.decode = {name: mix_decode_bytes(schedules, settings, scheduler.speculative_tokens)
                       for name, schedules in self.schedules.items()}

    def candidates(self, name: str, free_gib: float) -> list:
        """The release's own knob's candidates, then the project's strategies'."""
        profile = self.settings.profile
        if profile is None:
            return list(self.patched[name])
        measured = get_strategy("engine").budget_source(profile) == MEASURED_BUDGET
        key = (name, free_gib if measured else None)
        if key not in self.own:
            self.own[key] = engine_candidates(self.schedules[name], self.settings, free_bytes_from_gib(free_gib),
                                              self.budgets_mb, time_model=self.tm)
        return [replace(c, decode_bytes=self.decode[name]) for c in self.own[key] + self.patched[name]]

    def on_engine(self, engine) -> "AutoDeployments":
        """The same deployments and options, evaluated on another engine release."""
        if engine is not None and get_engine(engine).name == self.engine:
            return self
        return AutoDeployments(settings=self.settings.where(engine=engine), **self.options)

    def recommend(self, name: str, free_gib: float | None = None):
        free = self.deployments[name][1] if free_gib is None else free_gib
        return choose(self.candidates(name, free), free, self.tm.source)

    def table(self):
        """Per deployment: the line to deploy (the release's own knob) and its numbers, then what
        a patched engine could do with the project's strategies."""
        import pandas as pd

        rows = []
        for name, (_, free) in self.deployments.items():
            row = {"deployment": name, "free GiB": free, "engine": self.engine,
                   "scheduler not default": not_default_text(self.settings.profile, self.scheduler)}
            try:
                rec = self.recommend(name)
            except ValueError as e:
                rows.append({**row, "deploy": f"none fits: {e}"})
                continue
            row["deploy"] = rec.deploy_line
            d, p = rec.deployable, rec.patched
            if d is not None:
                row.update({"worst step MiB": round(d.needs_bytes / MIB), "margin MiB": round(rec.margin_bytes / MIB),
                            "time ms (modelled)": round(d.total_ms, 1), "chunks": d.total_chunks})
            if p is not None:
                row.update({"patched engine": f"{p.strategy} at {p.budget_mb:g} MiB",
                            "patched worst step MiB": round(p.needs_bytes / MIB),
                            "patched time ms (modelled)": round(p.total_ms, 1)})
            rows.append(row)
        return pd.DataFrame(rows)

    def candidates_frame(self, name: str, free_gib: float | None = None):
        import pandas as pd

        rec = self.recommend(name, free_gib)
        return pd.DataFrame([{**asdict(c), "needs_bytes": c.needs_bytes} for c in rec.candidates]), rec


def ledger_what_ifs(server, workload: ClosedLoopWorkload, free_gib: float | None = None):
    """The ledger of one run (``ledger.deployment``) as the server is given and under each what-if
    (``what_ifs``): (a tidy table, one row per what-if; [(what-if, its ``Ledger``)]).  ``free_gib``:
    the memory free when a step runs, as given (None: derived from the server's flags)."""
    import pandas as pd

    from ..ledger.deployment import deployment_ledger, what_ifs
    from ..presets import get_model

    rows, ledgers = [], []
    for name, changed in what_ifs(server, get_model(server.model), workload.max_prompt_len + workload.osl):
        d = deployment_ledger(changed, workload, free_gib=free_gib)
        ledger = d.run.ledger
        by_phase = {phase: max((line.bytes for line in ledger.of(phase)), default=0)
                    for phase in ("prefill", "decode", "allocator")}
        rows.append({"what_if": name, "boot_bytes": ledger.boot_bytes, "boot_kv_tokens": d.boot_kv_tokens,
                     **{f"{phase}_bytes": b for phase, b in by_phase.items()}, "chunks": d.run.chunks,
                     "free_bytes": ledger.free_bytes, "verdict": ledger.verdict,
                     "oom_line": ledger.oom_line.name if ledger.oom_line is not None else "",
                     "not_default": d.not_default, "mode": "model"})
        ledgers.append((name, ledger))
    return pd.DataFrame(rows), ledgers
