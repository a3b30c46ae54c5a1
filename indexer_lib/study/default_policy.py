"""What should an engine ship by default?  Each engine's candidate defaults for its indexer's
logits, over the field's deployments, each through the ledger (docs/design.md#default-policies).

A policy is one default an engine could ship: its own knob at a value (vLLM's
``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` and ATOM's ``ATOM_SPARSE_INDEXER_LOGITS_BUDGET_MB`` in MiB,
TensorRT-LLM's ``TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET`` as the same MiB in fp32 elements, on top of
its adaptive rows; SGLang's ``SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION``), a prefill logits buffer
(``--logits-buffer``), or one of the project's strategies at the release's default budget (what a
patched engine could do: no release's setting).  A deployment is a model on a GPU with its
server's flags and one workload: the public reports ``reproduce`` holds (their reporters' flags),
the field's deployments (``data/field/deployments.csv``, at their largest concurrency, with the
free memory measured there) and every model the project plans on every GPU at the release's
defaults.  Each engine runs a deployment on the release it was reported on, else on its latest
release that models the model's path; a release or GPU that refuses it is listed with its reason.
Each (engine, policy, deployment) is one row: ``deployment_ledger``'s verdict with only the policy
changed, what its boot lines take from the KV cache, and what it adds to time to first token and
per output token (``timemodel.ttft.added_time``, with the band of the published kernel checks).
Every number is modelled.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..checks import BadValue
from ..engines import ENGINES, engine_names, engines_for, get_engine, gpu_refusal
from ..engines.kv_capacity import kv_bytes_per_token
from ..ledger.deployment import Server, deployment_ledger
from ..presets import GIB, GPUS, MIB, get_model, known_models
from ..timemodel import TimeModel
from ..timemodel.ttft import added_time
from ..workload import ClosedLoopWorkload
from .releases import deployments as field_table
from .reported_ledger import ledger_cases

BUDGETS_MB = (64, 128, 256, 512, 1024, 2048, 4096)
FRACTIONS = (0.05, 0.1, 0.2, 0.4)
BUFFERS = ("fixed-width",)
PATCHED = ("causal",)
# the planned deployments' workloads: the field's concurrency x ISL, and a long context
WORKLOADS = ("64x10240x64", "1x131072x64")
# the budget a patched strategy gets where the release's is measured from free memory (vLLM's)
PATCHED_BUDGET_MB = 512
# the memory free when a step runs where the engine's server split is not read (TensorRT-LLM,
# ATOM) and the deployment gives none: the field's measured free memory (assumed elsewhere)
ASSUMED_FREE_GIB = 2.63


@dataclass(frozen=True)
class Policy:
    """One default an engine could ship; ``knob``: its own setting's value (None: the release's)."""

    name: str
    kind: str  # "default", "knob", "buffer" or "patched" (a project strategy: no release's setting)
    knob: float | None = None
    strategy: str = "engine"
    budget_mb: float | None = None  # a patched strategy's budget
    logits_buffer: str | None = None

    def server(self, base: Server) -> Server:
        """``base`` with only this policy changed."""
        if self.kind == "patched":
            return replace(base, budget_mb=self.budget_mb)
        if self.kind == "buffer":
            return replace(base, logits_buffer=self.logits_buffer)
        if self.knob is None:
            return base
        return replace(base, **({"budget_mb": self.knob} if get_engine(base.engine).engine == "vllm"
                                else {"knob": self.knob}))


def engine_policies(release: str, budgets_mb=BUDGETS_MB, fractions=FRACTIONS, buffers=BUFFERS,
                    strategies=PATCHED, model: str | None = None) -> list[Policy]:
    """The release's default first, then every other value of its own knob (none where its path
    for ``model`` reads no budget), the buffers and the patched strategies (at the release's
    default budget in MiB, else ``PATCHED_BUDGET_MB``)."""
    profile = get_engine(release)
    rule, default = profile.budget_rule, profile.budget_default
    if model is not None and profile.one_call_for(get_model(model)):
        values = []
    elif rule == "fixed-mib":
        values = [(mb, f"{mb:g} MiB") for mb in budgets_mb]
    elif rule == "fixed-elements":
        values = [(int(mb * MIB) // 4, f"{mb:g} MiB ({int(mb * MIB) // 4:,} elements)") for mb in budgets_mb]
    elif rule.startswith("sglang") and profile.budget_env is not None:
        values = [(f, f"free-memory fraction {f:g}") for f in fractions]
    else:
        values = []
    named = dict(values)
    shown = named.get(default) or (_knob_name(profile, default) if values else "no budget read")
    out = [Policy(f"{shown} (default)", "default")]
    out += [Policy(name, "knob", value) for value, name in values if value != default]
    out += [Policy(f"{kind} buffer", "buffer", logits_buffer=kind) for kind in buffers]
    mb = profile.default_budget_mb or PATCHED_BUDGET_MB
    out += [Policy(f"patched: {s} at {mb:g} MiB", "patched", strategy=s, budget_mb=mb) for s in strategies]
    return out


def _knob_name(profile, value) -> str:
    if profile.budget_rule == "fixed-mib":
        return f"{value:g} MiB"
    if profile.budget_rule == "fixed-elements":
        return f"{value * 4 / MIB:g} MiB ({int(value):,} elements)"
    return f"free-memory fraction {value:g}"


@dataclass(frozen=True)
class Deployment:
    """A model on a GPU, its server's flags (``Server``'s names; absent: the release's default) and
    one workload; ``engine``: the release it was reported on (None: any engine's)."""

    name: str
    source: str
    model: str
    gpu: str
    workload: ClosedLoopWorkload
    engine: str | None = None
    flags: tuple = ()
    free_gib: float | None = None  # the memory free as measured there (None: derived from the flags)

    def server(self, release: str) -> Server:
        return Server(self.model, release, self.gpu, **dict(self.flags))


def workload_of(text: str) -> ClosedLoopWorkload:
    """``CONCURRENCYxISLxOSL`` (BadValue naming a malformed one)."""
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise BadValue("workloads", f"workload {text!r}: must be CONCURRENCYxISLxOSL, e.g. 64x10240x64")
    return ClosedLoopWorkload(*(int(p) for p in parts))


def field_deployments() -> list[Deployment]:
    """``data/field/deployments.csv`` at each deployment's largest concurrency (the report's OOM
    point), with its scheduler settings and its measured free memory."""
    out = []
    for name, d in field_table().items():
        flags = tuple((k, int(d[k])) for k in ("max_num_batched_tokens", "max_num_seqs",
                                               "long_prefill_token_threshold") if d.get(k) is not None)
        workload = ClosedLoopWorkload(max(d["concurrency"]), int(d["isl"]), int(d["osl"]))
        out.append(Deployment(f"{name} c{workload.concurrency}", f"field: {d['source']}", d["model"], d["gpu"],
                              workload, None, flags, d["free_gib"]))
    return out


# the reported ledger's columns that are a server flag, as ``Server`` names it
REPORTED_FLAGS = ("tp", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
                  "speculative_tokens")


def reproduce_deployments() -> list[Deployment]:
    """Each server of ``data/field/reported_ledger.csv`` once, from its reporter's own flags (a
    case that sets the logits knob or expandable segments is a policy of a server already listed):
    with its workload, else one prompt at its max_model_len (less 64 output tokens)."""
    out, seen = [], set()
    for case in ledger_cases():
        if case["budget_mb"] is not None or case["expandable_segments"] == "true":
            continue
        flags = tuple((k, int(case[k]) if k != "gpu_memory_utilization" else case[k]) for k in REPORTED_FLAGS
                      if case[k] is not None)
        mml = int(case["max_model_len"] or get_model(case["model"]).max_model_len)
        workload = workload_of(case["workload"]) if case["workload"] else ClosedLoopWorkload(1, mml - 64, 64)
        key = (case["model"], case["engine"], case["gpu"], flags, workload)
        if key in seen:
            continue
        seen.add(key)
        out.append(Deployment(case["case"], f"reproduce: {case['source']}", case["model"], case["gpu"], workload,
                              case["engine"], flags))
    return out


def planned_models() -> list[str]:
    """Every model the project plans (``data/models/``; one not planned yet is left out)."""
    out = []
    for name in sorted(known_models()):
        try:
            out.append(get_model(name).name)
        except BadValue:
            continue
    return out


def planned_deployments(models=None, gpus=None, workloads=WORKLOADS) -> list[Deployment]:
    """Every model on every GPU (default: all the project plans) at the release's defaults, each
    workload that fits the model's context."""
    out = []
    for model in models or planned_models():
        mml = get_model(model).max_model_len
        for gpu in gpus or sorted(GPUS):
            for text in workloads:
                w = workload_of(text)
                if w.max_prompt_len + w.osl <= mml:
                    out.append(Deployment(f"{model} {gpu} {text}", "planned: the release's defaults", model, gpu, w))
    return out


def release_on(family: str, d: Deployment) -> str | None:
    """The release of ``family`` that runs ``d``: the one it was reported on, else the latest that
    models the model's path (its latest where none does, so that planning it says why); None where
    it was reported on another engine."""
    if d.engine is not None:
        return d.engine if get_engine(d.engine).engine == family else None
    modelled = [e for e in engines_for(get_model(d.model)) if get_engine(e).engine == family]
    return modelled[-1] if modelled else engine_names(family)[-1]


def study_deployments(models=None, gpus=None, workloads=WORKLOADS, reproduce: bool = True,
                      field: bool = True) -> list[Deployment]:
    """The study's deployments: the public reports', the field's, then the planned grid."""
    return ((reproduce_deployments() if reproduce else []) + (field_deployments() if field else [])
            + planned_deployments(models, gpus, workloads))


def policy_rows(deployments: list[Deployment], engines=ENGINES, budgets_mb=BUDGETS_MB, fractions=FRACTIONS,
                buffers=BUFFERS, strategies=PATCHED, assumed_free_gib: float = ASSUMED_FREE_GIB,
                time_model: TimeModel | None = None) -> list[dict]:
    """One row per engine, policy and deployment it runs on (plain data, modelled)."""
    tm = time_model or TimeModel.published()
    rows = []
    for family in engines:
        for d in deployments:
            release = release_on(family, d)
            if release is None:
                continue
            policies = engine_policies(release, budgets_mb, fractions, buffers, strategies, d.model)
            why = gpu_refusal(release, d.gpu, get_model(d.model))
            # vLLM's and SGLang's split of the GPU is derived from their flags; the others' is not read
            free = d.free_gib if d.free_gib is not None or family in ("vllm", "sglang") else assumed_free_gib
            bases = [_base_row(family, release, policy, d, free) for policy in policies]
            if why:
                rows += [{**base, "verdict": "skipped", "skipped": why} for base in bases]
                continue
            ledgers = [_ledger(policy, d, release, free) for policy in policies]
            times = _added_times(d.workload, [(p.strategy, dep) for p, dep in zip(policies, ledgers)
                                              if not isinstance(dep, str)], tm)
            rows += [_row(base, dep, d, times) for base, dep in zip(bases, ledgers)]
    return rows


def _base_row(family: str, release: str, policy: Policy, d: Deployment, free: float | None) -> dict:
    w = d.workload
    return {"engine": family, "release": release, "policy": policy.name, "policy_kind": policy.kind,
            "strategy": policy.strategy, "deployment": d.name, "deployment_source": d.source, "model": d.model,
            "gpu": d.gpu, "workload": f"{w.concurrency}x{w.isl}x{w.osl}",
            "flags": ", ".join(f"{k}={v}" for k, v in d.flags), "free_gib_given": free,
            "free_assumed": d.free_gib is None and free is not None, "mode": "modelled"}


def _ledger(policy: Policy, d: Deployment, release: str, free: float | None):
    """The deployment's ledger with only the policy changed, or why the release refuses it."""
    try:
        return deployment_ledger(policy.server(d.server(release)), d.workload, policy.strategy, free)
    except (BadValue, ValueError) as e:
        return str(e)


def _row(base: dict, dep, d: Deployment, times: dict) -> dict:
    """One policy on one deployment: the ledger's verdict, the KV cache its boot lines take (per
    GPU), the added time."""
    if isinstance(dep, str):
        return {**base, "verdict": "skipped", "skipped": dep}
    ledger = dep.run.ledger
    oom = ledger.oom_line
    per_token = kv_bytes_per_token(d.model, "auto", dict(d.flags).get("speculative_tokens", 0) > 0)
    return {**base, "verdict": ledger.verdict, "skipped": "", "oom_line": "" if oom is None else oom.name,
            "free_gib": ledger.free_bytes / GIB, "free_source": dep.free.source,
            "budget_mib": None if dep.budget_bytes is None else dep.budget_bytes / MIB,
            "needed_gib": ledger.needed_bytes / GIB, "kv_lost_gib": ledger.boot_bytes / GIB,
            "kv_lost_tokens": None if per_token is None else ledger.boot_bytes // per_token,
            "not_default": dep.not_default, **times[base["strategy"], dep.budget_bytes]}


def _added_times(workload: ClosedLoopWorkload, runs: list[tuple], tm: TimeModel) -> dict:
    """(strategy, budget bytes) -> the added time of each run's strategy at its budget: one
    simulated schedule per strategy, every budget of it together."""
    out = {}
    for strategy in dict.fromkeys(s for s, _ in runs):
        deps = [dep for s, dep in runs if s == strategy]
        budgets = list(dict.fromkeys(dep.budget_bytes for dep in deps))
        out.update(zip(((strategy, b) for b in budgets),
                       _added(workload, deps[0], strategy, budgets, tm)))
    return out


TIME_COLUMNS = ("added_ttft_p50", "added_ttft_p90", "added_per_output_token")


def _added(workload: ClosedLoopWorkload, dep, strategy: str, budgets: list, tm: TimeModel) -> list[dict]:
    """Per budget (bytes), the added time (ms) with its band, on ``dep``'s schedule and settings.
    The buffers change where the logits live, not the launches: they take the chunker's time."""
    mbs = [None if b is None else b / MIB for b in budgets]
    try:
        found = added_time(workload, dep.scheduler, strategy, mbs, dep.settings, tm)
    except (BadValue, ValueError) as e:
        return [{"time_skipped": str(e)}] * len(budgets)
    out = []
    for t in found:
        row = {"time_model": t["time_model"], "time_skipped": ""}
        for name in TIME_COLUMNS:
            ends = (t[f"{name}_low_ms"], t[f"{name}_high_ms"])
            row.update({f"{name}_ms": t[f"{name}_ms"], f"{name}_low_ms": min(ends), f"{name}_high_ms": max(ends)})
        out.append(row)
    return out


def policy_summary(rows: list[dict]) -> list[dict]:
    """Per engine and policy, over the deployments where the engine's default and every value of
    its knob run (``of_deployments``): how many it evaluates and how many OOM (and which), the mean
    KV cache its boot lines take, the mean added time to first token (p50, p90) and per output token
    with their bands, and whether it can win (a shippable policy evaluated on every one of them).
    The default's row also counts the deployments whose path reads no budget, where every knob
    value is the default (``other_deployments``, ``other_oom``)."""
    out = []
    for family in dict.fromkeys(r["engine"] for r in rows):
        mine = [r for r in rows if r["engine"] == family]
        ran: dict[str, set] = {}
        for r in mine:
            if r["verdict"] != "skipped":
                ran.setdefault(_key(r), set()).add(r["deployment"])
        knobs = {_key(r) for r in mine if r["policy_kind"] == "knob"}
        done = set.intersection(ran.get("default", set()), *(ran.get(k, set()) for k in knobs))
        for key in dict.fromkeys(_key(r) for r in mine):
            these = [r for r in mine if _key(r) == key and r["deployment"] in done and r["verdict"] != "skipped"]
            kind = next(r["policy_kind"] for r in mine if _key(r) == key)
            names = [r["policy"] for r in these] or [r["policy"] for r in mine if _key(r) == key]
            row = {"engine": family, "policy": max(set(names), key=names.count), "policy_kind": kind,
                   "deployments": len(these), "of_deployments": len(done), "oom": sum(r["verdict"] == "oom" for r in these),
                   "oom_deployments": [r["deployment"] for r in these if r["verdict"] == "oom"],
                   "eligible": kind != "patched" and len(these) == len(done) > 0,
                   "kv_lost_gib": _mean(these, "kv_lost_gib"), "mode": "modelled"}
            if kind == "default":
                other = [r for r in mine if _key(r) == key and r["verdict"] != "skipped" and r["deployment"] not in done]
                row.update(other_deployments=len(other), other_oom=sum(r["verdict"] == "oom" for r in other),
                           free_assumed=sorted({r["free_gib_given"] for r in these + other if r.get("free_assumed")}))
            for name in TIME_COLUMNS:
                for end in ("", "_low", "_high"):
                    row[f"{name}{end}_ms"] = _mean(these, f"{name}{end}_ms")
            out.append(row)
    return out


def _key(row: dict) -> str:
    """A row's policy, the release's default as one whatever it is on the deployment's path."""
    return "default" if row["policy_kind"] == "default" else row["policy"]


def _mean(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]  # NaN: no time
    return sum(values) / len(values) if values else None


def winner(summary: list[dict], family: str) -> tuple[dict | None, dict | None]:
    """(the policy that wins for ``family``: the fewest OOMs, then the least added TTFT p90, then
    the least KV lost, among the eligible ones; the release's default), None where none."""
    mine = [s for s in summary if s["engine"] == family]
    default = next((s for s in mine if s["policy_kind"] == "default" and s["deployments"]), None)
    if default is None:
        return None, None
    eligible = [s for s in mine if s["eligible"]]
    if not eligible:
        return None, default
    best = min(eligible, key=lambda s: (s["oom"], _or_inf(s["added_ttft_p90_ms"]), _or_inf(s["kv_lost_gib"])))
    return best, default


def _or_inf(value) -> float:
    return float("inf") if value is None else value


def _time_text(s: dict) -> str:
    if s["added_ttft_p90_ms"] is None:
        return "no modelled time"
    return (f"added TTFT p90 {s['added_ttft_p90_ms']:.1f} ms (band {s['added_ttft_p90_low_ms']:.1f}-"
            f"{s['added_ttft_p90_high_ms']:.1f}), {s['added_per_output_token_ms']:.2f} ms per output token")


RULE = "the fewest OOMs, then the least added TTFT p90, then the least KV cache lost at boot"


def _bare(policy: str) -> str:
    return policy.removesuffix(" (default)")


def engine_sentence(summary: list[dict], family: str) -> str:
    """Which default wins for ``family`` (``RULE``) and by how much, with the time's band (modelled)."""
    best, default = winner(summary, family)
    if default is None:
        return f"{family}: no deployment of the study runs on it (each refused or skipped, with the reason listed)."
    n, where = default["of_deployments"], _where(default)
    if best is None or best is default:
        return (f"{family}: the release's default ({_bare(default['policy'])}) wins: {default['oom']} of {n} "
                f"deployments OOM{where}, {_time_text(default)}, {default['kv_lost_gib']:.2f} GiB of KV cache per GPU "
                "at boot (means over the deployments; modelled).")
    return (f"{family}: {best['policy']} wins over the release's default ({_bare(default['policy'])}): "
            f"{best['oom']} vs {default['oom']} of {n} deployments OOM{where}; {_difference(best, default)}; KV cache "
            f"lost at boot {best['kv_lost_gib']:.2f} vs {default['kv_lost_gib']:.2f} GiB per GPU (means over the "
            "deployments; modelled).")


def _difference(best: dict, default: dict) -> str:
    """What the winner adds to the default's time, with the band of the difference (each end of
    one against the other end of the other)."""
    if best["added_ttft_p90_ms"] is None or default["added_ttft_p90_ms"] is None:
        return "no modelled time"
    diff = best["added_ttft_p90_ms"] - default["added_ttft_p90_ms"]
    low = best["added_ttft_p90_low_ms"] - default["added_ttft_p90_high_ms"]
    high = best["added_ttft_p90_high_ms"] - default["added_ttft_p90_low_ms"]
    per_token = best["added_per_output_token_ms"] - default["added_per_output_token_ms"]
    return (f"added TTFT p90 {diff:+.1f} ms (band {low:+.1f} to {high:+.1f}{', within it' if low <= 0 <= high else ''}; "
            f"{best['added_ttft_p90_ms']:.1f} vs {default['added_ttft_p90_ms']:.1f} ms), {per_token:+.2f} ms per "
            "output token")


def _where(default: dict) -> str:
    """Where the default OOMs (the first three), and the deployments no knob value changes."""
    names = default["oom_deployments"]
    text = f" (the default on {', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''})" if names else ""
    if default.get("free_assumed"):
        text += f"; free memory assumed {', '.join(f'{g:g}' for g in default['free_assumed'])} GiB where none is given"
    if default.get("other_deployments"):
        text += (f"; on {default['other_deployments']} more, whose path reads no budget, every value is the default "
                 f"({default['other_oom']} OOM)")
    return text


def winner_table(rows: list[dict], by: str = "gpu") -> list[dict]:
    """Per engine and value of ``by`` (a row's gpu or model): the winning policy and the release's
    default, their OOM counts and mean added TTFT p90 (modelled)."""
    out = []
    for value in dict.fromkeys(r[by] for r in rows):
        summary = policy_summary([r for r in rows if r[by] == value])
        for family in dict.fromkeys(s["engine"] for s in summary):
            best, default = winner(summary, family)
            if default is None:
                continue
            out.append({"engine": family, by: value, "deployments": default["of_deployments"],
                        "wins": None if best is None else best["policy"], "wins_oom": None if best is None else best["oom"],
                        "wins_ttft_p90_ms": None if best is None else best["added_ttft_p90_ms"],
                        "default": default["policy"], "default_oom": default["oom"],
                        "default_ttft_p90_ms": default["added_ttft_p90_ms"], "mode": "modelled"})
    return out


def engine_sentences(rows: list[dict]) -> list[str]:
    summary = policy_summary(rows)
    return [engine_sentence(summary, family) for family in dict.fromkeys(r["engine"] for r in rows)]
