"""How far a frontier's worst step is from the worst the scheduler can build (modelled).

A frontier point's "worst step" is the worst of one simulated closed loop: its clients' prompts
sent in waves (two by default: 2 x concurrency prompts), lengths drawn from one seed and sent
in the order drawn, the release's scheduler.  ``search`` runs the same workload with more waves
and, where lengths are drawn (a range ratio or a mix), other seeds and other arrival orders of the
same lengths (``lengths.ORDERS``), and reports the worst step found against the sample's and
where it was found; ``ceiling_logits_bytes`` gives the analytic bound without a budget: no step
has more query rows
than ``max_num_batched_tokens``, nor more requests than rows, clients or ``max_num_seqs``, nor
a request longer than the longest prompt (docs/design.md#bounds).
"""
from __future__ import annotations

from dataclasses import replace

from ..padding import get_rules
from ..plan import PlanSettings
from ..memory import make_plan
from ..workload import ClosedLoopWorkload, SchedulerConfig
from ..workload.lengths import ORDERS
from ..search.worst_step import Schedule, prefill_batches, worst_step

DEFAULT_WAVES = (2, 3, 4, 6)
DEFAULT_SEEDS = tuple(range(6))
DEFAULT_ORDERS = ORDERS
# what ``search`` tries: (waves, seeds, arrival orders)
DEFAULT_SPACE = (DEFAULT_WAVES, DEFAULT_SEEDS, DEFAULT_ORDERS)


def _waves(workload: ClosedLoopWorkload) -> str:
    return f"{workload.total_prompts / workload.concurrency:g} waves"


def sample_text(workload: ClosedLoopWorkload) -> str:
    """What a frontier's worst step is the worst of, in words."""
    lengths = ("one length" if workload.homogeneous
               else f"lengths from seed {workload.seed}, sent in order {workload.order}")
    return (f"the worst step of one simulated closed loop: {workload.total_prompts} prompts "
            f"({_waves(workload)} of {workload.concurrency}), {lengths}")


def searched_text(workload: ClosedLoopWorkload, waves=DEFAULT_WAVES, seeds=DEFAULT_SEEDS,
                  orders=DEFAULT_ORDERS) -> str:
    """What ``search`` tries, in a few words for a table's column: 'waves 2/3/4/6 x seeds 0-5 x 4
    orders' (seeds and orders only where lengths are drawn)."""
    text = f"waves {'/'.join(map(str, waves))}"
    if not workload.homogeneous:
        seeds = list(seeds)
        run = len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
        text += f" x seeds {f'{seeds[0]}-{seeds[-1]}' if run else '/'.join(map(str, seeds))} x {len(orders)} orders"
    return text


def variants(workload: ClosedLoopWorkload, waves=DEFAULT_WAVES, seeds=DEFAULT_SEEDS,
             orders=DEFAULT_ORDERS) -> list[ClosedLoopWorkload]:
    """The workload with more waves and, where its lengths are drawn, other seeds and arrival
    orders (itself first)."""
    drawn = not workload.homogeneous
    out = [workload]
    for w in waves:
        for seed in (seeds if drawn else (workload.seed,)):
            for order in (orders if drawn else (workload.order,)):
                v = replace(workload, num_prompts=w * workload.concurrency, seed=seed, order=order)
                if v not in out:
                    out.append(v)
    return out


def found_text(workload: ClosedLoopWorkload) -> str:
    """Which variant a worst step was found in: '4 waves, seed 2, longest-first'."""
    return _waves(workload) + ("" if workload.homogeneous else f", seed {workload.seed}, {workload.order}")


def search(workload: ClosedLoopWorkload, config: SchedulerConfig, strategy: str, budget_bytes: int | None,
           settings: PlanSettings, space=DEFAULT_SPACE, schedules: dict | None = None) -> dict:
    """The sample's worst step against the worst found over the variants (transient bytes).
    ``space``: the (waves, seeds, orders) the variants are made of (``variants``); ``schedules``:
    the variants' schedules, kept between calls on the same workload and config (the strategies of
    ``bounds_table`` share them)."""
    schedules = {} if schedules is None else schedules
    results = []
    for v in variants(workload, *space):
        if (v, config) not in schedules:
            schedules[(v, config)] = Schedule(prefill_batches(v, config))
        schedule = schedules[(v, config)]
        w = worst_step(schedule, strategy, budget_bytes, settings, topk_rows=config.max_num_batched_tokens)
        largest = make_plan(schedule.step(w.worst_step), strategy, budget_bytes, settings).largest_logits_bytes
        results.append((v, w, largest))
    (_, sample, sample_logits) = results[0]
    found_in, found, found_logits = max(results, key=lambda r: r[1].peak_transient_bytes)
    # the arrival order alone: the sample's prompts and seed in every order
    reordered = max(r[1].peak_transient_bytes for r in results
                    if (r[0].total_prompts, r[0].seed) == (workload.total_prompts, workload.seed))
    layout = settings.profile.layout if settings.profile is not None else "full"  # the release's logits layout
    return {
        "concurrency": workload.concurrency, "isl": workload.isl, "strategy": strategy,
        "budget_mb": None if budget_bytes is None else budget_bytes / 2**20,
        "sample": sample_text(workload), "sample_peak_gib": sample.peak_transient_bytes / 2**30,
        "sample_logits_gib": sample_logits / 2**30, "searched": len(results),
        "searched_over": searched_text(workload, *space),
        "found_peak_gib": found.peak_transient_bytes / 2**30, "found_logits_gib": found_logits / 2**30,
        "found_in": found_text(found_in),
        "found_over_sample": found.peak_transient_bytes / max(1, sample.peak_transient_bytes),
        "order_over_sample": reordered / max(1, sample.peak_transient_bytes),
        "ceiling_logits_gib": ceiling_logits_bytes(workload, config, settings, layout) / 2**30,
        "mode": "model",
    }


def ceiling_logits_bytes(workload: ClosedLoopWorkload, config: SchedulerConfig, settings: PlanSettings,
                         layout: str = "full") -> int:
    """The largest logits one step can ask for in one call without a budget (DeepGEMM's padding
    of the settings' build included, and on SM100 under vLLM 0.33.0 the fp32 copy): rows up to the token budget, each request at least one
    row, every request as long as the longest prompt any seed can draw; the compressed layout is
    as wide as one request."""
    rows = config.max_num_batched_tokens
    requests = min(rows, workload.concurrency, config.max_num_seqs, workload.total_prompts)
    longest = workload.max_prompt_len // settings.preset.kv_ratio
    compressed = layout == "compressed"
    width = longest if compressed else requests * longest
    if settings.upcast:  # DeepGEMM's bf16 and the release's fp32 copy, alive at once (padding.upcast_counters)
        return settings.counters[1](rows, width, compressed) + settings.staged(rows, width, compressed)
    return get_rules(settings.deepgemm).logits_bytes(rows, width, settings.preset.index_heads, compressed)


def bounds_table(model: str, engine: str, gpu: str = "h200", concurrency: int = 64, osl: int = 64,
                 strategies=("n-only", "engine"), budget_mb: float = 512, config: SchedulerConfig | None = None):
    """``search`` on three workloads of one concurrency (prompts of one length at 10,240 tokens;
    the same with vLLM bench's range ratio 0.5; 2% of the prompts at 128K among 2K ones), per
    strategy (a budgeted one at ``budget_mb``), on ``config`` (None: the release's scheduler
    defaults; a setting that differs is named in each row's ``not_default``)."""
    import pandas as pd

    from ..engines import not_default_text, release_scheduler
    from ..plan import get_strategy
    from ..presets import get_model

    settings = PlanSettings(model, engine, temporaries="deepgemm", gpu=gpu)
    config = config or release_scheduler(engine, get_model(model).kv_block, gpu)
    workloads = {"one length": ClosedLoopWorkload(concurrency, 10240, osl),
                 "range ratio 0.5": ClosedLoopWorkload(concurrency, 10240, osl, random_range_ratio=0.5),
                 "2% at 128K among 2K": ClosedLoopWorkload(concurrency, 2048, osl, mix="0.02x131072")}
    rows = []
    for name, workload in workloads.items():
        schedules = {}  # each variant scheduled once for every strategy
        for strategy in strategies:
            budget = get_strategy(strategy).budget_bytes(budget_mb, None, settings)
            rows.append({"workload": name, **search(workload, config, strategy, budget, settings,
                                                    schedules=schedules), "engine": engine,
                         "not_default": not_default_text(engine, config, gpu)})
    return pd.DataFrame(rows)
