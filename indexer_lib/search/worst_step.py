"""The worst step of a schedule: scheduler simulator + planners + memory model.

For a workload (concurrency x ISL x OSL ...) the simulator yields every prefill step; each
strategy and budget plans every step; the memory model finds the worst step.  A point is OOM
when the worst step's transient bytes exceed the memory free at run time.  Every number here
is modelled, never measured.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

from ..fast import StepOutcomes
from ..fast.step_table import step_table
from ..memory import StepPeaks
from ..plan import PlanSettings, Strategy, get_strategy
from ..workload import ClosedLoopWorkload, PrefillRequest, SchedulerConfig, StepBatch, scheduled_steps


def prefill_batches(workload: ClosedLoopWorkload, config: SchedulerConfig,
                    source: str = "simulator") -> list[StepBatch]:
    """The step batches the indexer's prefill path sees over the whole schedule.

    ``source``: "simulator" (built-in, fast) or "vllm" (vLLM's own scheduler;
    needs vLLM, see scripts/install_vllm.sh).
    """
    return [s.batch for s in scheduled_steps(workload, config, source) if s.batch is not None]


@dataclass(frozen=True)
class WorstStep:
    """A strategy and budget over a whole schedule, summarised by its worst step."""

    strategy: str
    budget_bytes: int | None
    worst_step: int  # engine step index of the step with the largest transient peak
    worst_rows: int  # M of that step
    worst_kv_tokens: int  # N of that step
    worst_chunks: int  # chunks that step needs
    peak_bytes: int  # persistent + transient peak of that step
    peak_transient_bytes: int
    max_chunks: int  # most chunks any step needs
    total_chunks: int  # chunks over the whole schedule
    over_budget: bool  # some chunk could not meet the budget
    budget_stable: tuple[int, int | None] = (0, None)  # the budgets the worst step's plan holds for
    layer_kind: str | None = None  # a model whose kinds see a step differently: the kind that sets it


class Schedule:
    """A schedule's prefill steps, with identical steps grouped so each is planned once, and the
    most requests one step decodes (``most_decoding``; None where the schedule was given as
    prefill batches alone)."""

    def __init__(self, batches: list[StepBatch], most_decoding: int | None = None):
        if not batches:
            raise ValueError("no prefill steps: the schedule has nothing for the indexer to do")
        self.batches = batches
        self.most_decoding = most_decoding
        self.by_step = {batch.step: batch for batch in batches}  # the batch of an engine step
        first: dict[tuple, int] = {}
        self.unique: list[StepBatch] = []  # first occurrence of each distinct step
        self.count: list[int] = []  # how often each distinct step occurs
        for batch in batches:
            # the lengths are tuples of ints (hashed in C; the planners read them anyway)
            k = first.setdefault((batch.query_lens, batch.seq_lens), len(self.unique))
            if k == len(self.unique):
                self.unique.append(batch)
                self.count.append(0)
            self.count[k] += 1

    @classmethod
    def of(cls, workload: ClosedLoopWorkload, config: SchedulerConfig, source: str = "simulator") -> "Schedule":
        """The schedule of a workload under a scheduler (``prefill_batches``' source), with the most
        requests one step decodes."""
        batches, most = [], 0
        for s in scheduled_steps(workload, config, source):
            if s.batch is not None:
                batches.append(s.batch)
            most = max(most, s.num_decode)
        return cls(batches, most)

    def step(self, index: int) -> StepBatch:
        """The batch of an engine step."""
        return self.by_step[index]

    def alone(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indices into ``unique``, query lens, context lens) of the distinct steps that hold one
        request (``fast.step_table`` evaluates them together); found once."""
        return self._of_few()[0]

    def of_two(self) -> tuple[np.ndarray, ...]:
        """(indices into ``unique``, then the first request's query and context lens, then the
        second's) of the distinct steps that hold two requests; found once."""
        return self._of_few()[1]

    def _of_few(self):
        found = self.__dict__.get("_few")
        if found is None:
            found = self.__dict__["_few"] = tuple(self._holding(n) for n in (1, 2))
        return found

    def _holding(self, n: int) -> tuple[np.ndarray, ...]:
        at = [k for k, batch in enumerate(self.unique) if len(batch.query_lens) == n and batch.kv_ratio == 1]
        columns = [np.array(at, dtype=np.int64)]
        for i in range(n):
            requests = [self.unique[k].requests[i] for k in at]
            columns += [np.array([r.query_len for r in requests], dtype=np.int64),
                        np.array([r.context_len for r in requests], dtype=np.int64)]
        return tuple(columns)


# a dashboard's change and a grid ask it again for every workload: made once per settings
@functools.lru_cache(maxsize=256)
def _step_outcomes(strategy: Strategy, settings: PlanSettings, topk_rows: int | None) -> StepOutcomes:
    # any step serves as the template: only its settings are read
    return StepOutcomes(strategy, settings, topk_rows, StepBatch((PrefillRequest(0, 1),)))


def worst_steps(schedule: list[StepBatch] | Schedule, strategy: str | Strategy, budgets: list[int | None],
                settings: PlanSettings = PlanSettings(), topk_rows: int | None = None,
                tables: bool = True) -> list[WorstStep]:
    """The worst step over a schedule at each budget: every distinct step planned at each budget
    (once per budget interval, ``fast.StepOutcomes``; the steps of one request and of two
    together, ``fast.step_table``, where the strategy evaluates arrays of steps and ``tables`` is
    true), the one with the largest
    transient peak taken (ties: the earliest).  ``settings.temporaries`` names whose temporaries
    each chunk adds; ``topk_rows``: rows of the top-k buffer (vLLM: max_num_batched_tokens)."""
    schedule = schedule if isinstance(schedule, Schedule) else Schedule(schedule)
    strategy = get_strategy(strategy)
    if settings.kind is None and settings.preset.multi_kind:
        # kinds that see a step differently (DeepSeek-V4.1): a step's peak is the worst over its
        # kinds, so the schedule's worst is the worst kind's worst step (the first kind on a tie)
        per_kind = [[replace(w, layer_kind=kind.kind)
                     for w in worst_steps(schedule, strategy, budgets, kind, topk_rows, tables)]
                    for kind in _kinds(settings)]
        return [max(at_budget, key=lambda w: w.peak_transient_bytes) for at_budget in zip(*per_kind)]
    outcomes = _step_outcomes(strategy, settings, topk_rows)
    few, columns = _table_columns(schedule, strategy, budgets, settings, topk_rows) if tables else (None, None)
    few = few if columns is not None else np.zeros(0, dtype=np.int64)
    rest = np.ones(len(schedule.unique), dtype=bool)
    rest[few] = False
    rest = np.flatnonzero(rest).tolist()
    per_step = [outcomes.at_budgets(schedule.unique[k], budgets) for k in rest]
    counts = np.array(schedule.count, dtype=np.int64)
    results = []
    for i, budget in enumerate(budgets):
        column = [step[i] for step in per_step]
        transients = np.zeros(len(schedule.unique), dtype=np.int64)
        chunks = np.zeros(len(schedule.unique), dtype=np.int64)
        transients[rest] = [o.transient for o in column]
        chunks[rest] = [o.chunks for o in column]
        over = any(o.over_budget for o in column)
        if columns is not None:
            found = columns[i]
            transients[few], chunks[few] = found.transient, found.chunks
            over = over or bool(found.over_budget.any())
        worst = int(np.argmax(transients))  # the first of the largest
        batch = schedule.unique[worst]
        # the worst step's own plan (a step of one or two requests was not planned): its budget interval
        outcome = outcomes.at_budgets(batch, [budget])[0]
        results.append(WorstStep(strategy.name, budget, batch.step, batch.num_rows, batch.num_kv_tokens,
                                 outcome.chunks, outcome.peak, outcome.transient, int(chunks.max()),
                                 int(chunks @ counts), over, outcome.budget_stable))
    return results


def _kinds(settings: PlanSettings) -> list[PlanSettings]:
    """The settings a step is planned under: one per layer kind where the kinds see a step
    differently (DeepSeek-V4.1), else these."""
    if settings.kind is None and settings.preset.multi_kind:
        return [settings.of_kind(k.name) for k in settings.preset.indexing_kinds]
    return [settings]


def evaluate_steps_together(jobs) -> None:
    """Before ``worst_steps`` runs on many schedules, ``jobs`` of (schedule, strategy, budgets,
    settings, top-k rows): their steps of one request, and of two, are evaluated together, once
    per settings and budget (``fast.step_table.StepTable.keep``), so that each ``worst_steps`` looks
    them up."""
    wanted: dict = {}  # (table, lengths per step) -> (budgets, [lengths of a schedule's steps])
    for schedule, strategy, budgets, settings, topk_rows in jobs:
        found = [few[1:] for few in (schedule.alone(), schedule.of_two()) if few[0].size]
        if not found:
            continue
        for kind_settings in _kinds(settings):
            table = step_table(get_strategy(strategy), kind_settings, topk_rows)
            if table is not None:
                for lengths in found:
                    asked, steps = wanted.setdefault((table, len(lengths)), ({}, []))
                    asked.update(dict.fromkeys(budgets))
                    steps.append(lengths)
    for (table, _), (budgets, steps) in wanted.items():
        q, c, *second = (np.concatenate(column) for column in zip(*steps))
        table.keep(q, c, list(budgets), second or None)


def _table_columns(schedule: Schedule, strategy: Strategy, budgets: list[int | None], settings: PlanSettings,
                   topk_rows: int | None) -> tuple[np.ndarray | None, list | None]:
    """(indices into ``unique``, the outcomes of those steps at each budget) of the schedule's
    steps of one request and of two (``fast.step_table``); (None, None) where the strategy does not
    evaluate arrays of steps under the settings or reads no such budget (the plain path then plans
    them)."""
    evaluator = step_table(strategy, settings, topk_rows)
    if evaluator is None:
        return None, None
    parts = [(at, lengths) for at, *lengths in (schedule.alone(), schedule.of_two()) if at.size]
    if not parts:
        return None, None
    columns = []
    for budget in budgets:
        found = [evaluator.at_budget(lengths[0], lengths[1], budget, lengths[2:] or None) for _, lengths in parts]
        if any(f is None for f in found):
            return None, None
        columns.append(found[0] if len(found) == 1 else StepPeaks(*(np.concatenate(x) for x in zip(*found))))
    return np.concatenate([at for at, _ in parts]), columns


def worst_step(schedule: list[StepBatch] | Schedule, strategy: str | Strategy, budget_bytes: int | None,
               settings: PlanSettings = PlanSettings(), topk_rows: int | None = None) -> WorstStep:
    """The step with the largest transient peak over a schedule, for one strategy and budget."""
    return worst_steps(schedule, strategy, [budget_bytes], settings, topk_rows)[0]
