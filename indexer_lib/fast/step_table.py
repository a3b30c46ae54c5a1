"""Steps of as many requests evaluated together with numpy, and kept per budget.

In a long-context schedule nearly every distinct step holds one request (a prompt's chunk
against its growing context), and most others two (a prompt's last rows with the next one's
first): a million-token workload has thousands, each planned at every budget by every
strategy.  ``StepTable`` gives what ``StepOutcomes.at_budgets`` gives such a step (transient
and total peak, chunk count, over budget; not the budget interval) for arrays of them at once:
the strategy's own ``split`` (its packing, or the release's own path) runs once on a
``workload.StepArrays`` into ``memory.StepsMemory``.  No rule is written here: this module keeps
the results, one table per budget and number of requests, so that the many schedules of a grid
or a dashboard's change look their steps up.  ``step_table`` returns None where the strategy is
not written for arrays under the settings; those take the plain path.  ``test_step_table``
holds it to ``StepOutcomes`` step by step.
"""
from __future__ import annotations

import functools
import weakref
from typing import NamedTuple

import numpy as np

from ..memory import ChunkBytes, StepPeaks, StepsMemory
from ..plan import Budgeting, PlanSettings, Strategy, get_strategy
from ..workload import StepArrays

# a request (query_len, context_len) as one sortable number: both are far below 2^31 tokens;
# a step of two requests, as a pair of them
KEY_SHIFT = 32
KEY_MASK = (1 << KEY_SHIFT) - 1
PAIR_KEY = np.dtype([("first", np.int64), ("second", np.int64)])


def as_lengths(query_lens, context_lens, second=None) -> tuple[np.ndarray, ...]:
    """(query lens, context lens), and the second requests' where ``second`` names them, as arrays."""
    lengths = (query_lens, context_lens) + (tuple(second) if second is not None else ())
    return tuple(np.asarray(x, dtype=np.int64) for x in lengths)


def step_keys(*lengths: np.ndarray) -> np.ndarray:
    """Sortable keys of steps given as ``as_lengths`` gives them."""
    if len(lengths) == 2:
        query_lens, context_lens = lengths
        return (query_lens << KEY_SHIFT) | context_lens
    keys = np.empty(lengths[0].shape, PAIR_KEY)
    keys["first"], keys["second"] = step_keys(*lengths[:2]), step_keys(*lengths[2:])
    return keys


def lengths_of(keys: np.ndarray) -> tuple[np.ndarray, ...]:
    """``step_keys``' lengths again."""
    if keys.dtype == PAIR_KEY:
        return lengths_of(keys["first"]) + lengths_of(keys["second"])
    return keys >> KEY_SHIFT, keys & KEY_MASK


class KeptOutcomes(NamedTuple):
    """Outcomes at one budget, by step key (sorted)."""

    keys: np.ndarray
    outcomes: StepPeaks

    def holds(self, keys: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return self.keys[at] == keys

    def look_up(self, keys: np.ndarray) -> StepPeaks | None:
        """These steps' outcomes, or None where one of them is not kept."""
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        if not (self.keys[at] == keys).all():
            return None
        return StepPeaks(*(a[at] for a in self.outcomes))

    def merged(self, keys: np.ndarray, outcomes: StepPeaks) -> "KeptOutcomes":
        """These kept with more (keys not among them)."""
        every = np.concatenate([self.keys, keys])
        order = np.argsort(every, kind="stable")
        return KeptOutcomes(every[order], StepPeaks(*(np.concatenate([a, b])[order]
                                                      for a, b in zip(self.outcomes, outcomes))))


# every table's kept steps hold at most this many steps in all (about 40 bytes a step): past it
# they are all emptied, so a long-lived dashboard's memory stays bounded
KEPT_STEPS = 1 << 22
_KEEPING: "weakref.WeakSet[StepTable]" = weakref.WeakSet()
_kept = [0]  # steps kept now


def _count_kept(steps: int) -> bool:
    """Counts steps kept (or, negative, let go); True where the limit emptied every table first."""
    emptied = _kept[0] + steps > KEPT_STEPS
    if emptied:
        for table in _KEEPING:
            table.kept.clear()
        _kept[0] = 0
    _kept[0] += steps
    return emptied


@functools.lru_cache(maxsize=256)  # asked again for every workload of a grid or a dashboard's change
def step_table(strategy: str | Strategy, settings: PlanSettings, topk_rows: int | None) -> "StepTable | None":
    """The table for these settings, or None where the strategy is not evaluated for arrays of
    steps under them (the plain path plans those)."""
    strategy = get_strategy(strategy)
    runs = strategy.runs_under(settings)
    # DeepSeek-V4.1 is taken one kind at a time (``PlanSettings.kind``)
    if (runs.temporaries not in ("deepgemm", None) or strategy.logits_alive(runs) not in (1, 2)
            or (runs.kind is None and runs.preset.multi_kind) or runs.preset.topk < 1
            or not strategy.evaluates_arrays(runs)):
        return None
    return StepTable(strategy, runs, topk_rows)


class StepTable:
    """``at_budget(query_lens, context_lens, budget, second)``: the outcomes of steps of one request
    each, or of two, planned by the strategy's own ``split`` on arrays of them."""

    KEPT_TABLES = 64  # tables kept, one per budget and number of requests (a dashboard's budgets, a grid's)

    def __init__(self, strategy: Strategy, settings: PlanSettings, topk_rows: int | None):
        self.strategy, self.settings, self.topk_rows = strategy, settings, topk_rows
        self.alive = strategy.logits_alive(settings)
        self.chunk_bytes = ChunkBytes(settings, settings.temporaries == "deepgemm", settings.preset.topk)
        self.budget_read = strategy.budget_read(settings)  # "given" (a budget), "none" or "any"
        self.kept: dict[tuple, KeptOutcomes] = {}  # (budget, lengths per step) -> what ``keep`` evaluated
        _KEEPING.add(self)

    def reads(self, budget: int | None) -> bool:
        """Whether it evaluates at this budget (else the strategy's check refuses it, on the plain path)."""
        if budget is None:
            return self.budget_read in ("none", "any")
        return self.budget_read in ("given", "any") and type(budget) is int and budget >= 1

    def at_budget(self, query_lens, context_lens, budget: int | None, second=None) -> StepPeaks | None:
        """The outcomes of steps of one request each, (query_len, context_len), at one budget
        (None: the strategy's check refuses the budget: the plain path plans them).  ``second``:
        (query lens, context lens) of each step's second request, for steps of two.  Looked up
        where ``keep`` evaluated them all, else evaluated."""
        lengths = as_lengths(query_lens, context_lens, second)
        if not self.reads(budget):
            return None
        kept = self.kept.get((budget, len(lengths)))
        found = kept.look_up(step_keys(*lengths)) if kept is not None else None
        return found if found is not None else self.evaluate(lengths, budget)

    def keep(self, query_lens, context_lens, budgets, second=None) -> None:
        """Evaluates these steps at each of these budgets, each distinct step once per budget, and
        keeps the outcomes: the many schedules of a grid or a dashboard's change share most of their
        steps, and one numpy pass over all of them, at every budget at once, costs little more
        than one over a schedule's at one budget."""
        lengths = as_lengths(query_lens, context_lens, second)
        keys = np.unique(step_keys(*lengths))
        asked = []  # (budget, the keys not kept at it)
        for budget in dict.fromkeys(budgets):
            table = (budget, len(lengths))
            kept = self.kept.pop(table, None)
            if kept is not None:
                self.kept[table] = kept  # asked again: the newest
            new = keys if kept is None else keys[~kept.holds(keys)]
            if self.reads(budget) and new.size:
                asked.append((budget, new))
        together = [(b, k) for b, k in asked if b is not None]  # one pass for every budget given
        alone = [(b, k) for b, k in asked if b is None]
        for part in (together, alone):
            if not part:
                continue
            every = np.concatenate([k for _, k in part])
            budget = part[0][0] if len(part) == 1 else np.repeat([b for b, _ in part], [k.size for _, k in part])
            found = self.evaluate(lengths_of(every), budget)
            start = 0
            for b, k in part:
                self._keep((b, len(lengths)), k, StepPeaks(*(a[start:start + k.size] for a in found)))
                start += k.size

    def _keep(self, table: tuple, keys: np.ndarray, found: StepPeaks) -> None:
        """Keeps these steps' outcomes in one table (keys not kept there yet), the newest last."""
        kept = self.kept.pop(table, None)  # re-inserted last: the oldest goes first
        if _count_kept(keys.size):  # every table was emptied: this one starts again
            kept = None
        self.kept[table] = KeptOutcomes(keys, found) if kept is None else kept.merged(keys, found)
        while len(self.kept) > self.KEPT_TABLES:
            _count_kept(-self.kept.pop(next(iter(self.kept))).keys.size)

    def evaluate(self, lengths: tuple, budget) -> StepPeaks:
        """``at_budget``, computed: the strategy's split of the steps, as the indexer sees them
        (``PlanSettings.view``), into ``StepsMemory``.  ``budget``: one for every step, or an array
        of them, one a step."""
        settings = self.settings
        steps = settings.view(StepArrays.from_lengths(*lengths))
        b = Budgeting(settings, budget, settings.workspace or steps.num_kv_tokens, tracks=False)
        build = StepsMemory(steps, b, self.chunk_bytes, self.alive)
        self.strategy.split(steps, b, build)
        return build.outcomes(self.topk_rows, settings.preset.topk)
