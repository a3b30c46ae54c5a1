"""A step's plan as a frontier needs it: its chunk count and distinct chunk shapes, planned by
the strategy's own code into a shape builder (``fast.shapes``), with the settings resolved once
for the many steps and budgets of a frontier."""
from __future__ import annotations

from typing import NamedTuple

from ..plan import Plan, PlanSettings, Strategy, get_strategy, step_budgeting
from ..workload import StepBatch
from .records import made_fast
from .shapes import ChunkShape, NeighbourShapeBuilder, ShapeBuilder


class StepShapes(NamedTuple):
    """What a frontier reads of a step's plan: its budget interval, workspace, chunk count,
    whether a chunk breaks a limit, its distinct shapes and, where the plan keeps two chunks'
    logits alive (``Plan.logits_alive``), the distinct pairs (shape before or None, shape)."""

    budget_stable: tuple[int, int | None]
    workspace_tokens: int
    num_chunks: int
    over_budget: bool
    shapes: tuple[ChunkShape, ...]
    pairs: tuple[tuple, ...] | None


class PlanShapes(NamedTuple):
    """``StepShapes`` with the plan record they belong to (its ``chunks`` empty)."""

    plan: Plan
    num_chunks: int
    over_budget: bool
    shapes: tuple[ChunkShape, ...]
    pairs: tuple[tuple, ...] | None = None


class ShapePlanner:
    """``make_plan`` as counts and shapes, for one strategy and one set of settings."""

    def __init__(self, strategy: str | Strategy, settings: PlanSettings):
        self.strategy = get_strategy(strategy)
        if not self.strategy.by_shapes:
            raise ValueError(f"strategy {self.strategy.name!r}: its chunks' memory depends on more than "
                             "their shapes; plan it with make_plan")
        self.settings = self.strategy.runs_under(settings)
        self.logits_alive = self.strategy.logits_alive(self.settings)
        self.builder = NeighbourShapeBuilder if self.logits_alive > 1 else ShapeBuilder
        self.split = self.strategy.split  # at hand for the many steps of a grid
        # the model's indexer scores compressed K, or one kind of it is planned (V4.1's c1 kinds see
        # each request's last rows): the step is planned as it sees it (``PlanSettings.view``)
        self.viewed = self.settings.preset.kv_ratio != 1 or self.settings.kind is not None

    def split_step(self, batch: StepBatch, budget_bytes: int | None):
        """(budgeting, shape builder) of the step's plan at this budget."""
        if self.viewed:
            batch = self.settings.view(batch)
        b = step_budgeting(self.strategy, self.settings, batch, budget_bytes)
        found = self.builder(batch, b)
        self.split(batch, b, found)
        return b, found

    def shapes(self, batch: StepBatch, budget_bytes: int | None) -> StepShapes:
        """The step's plan at this budget, as counts and distinct shapes (and pairs)."""
        b, found = self.split_step(batch, budget_bytes)
        pairs = tuple(found.pairs) if self.logits_alive > 1 else None
        return tuple.__new__(StepShapes, ((b.stable_low, b.stable_high), b.workspace, found.num_chunks,
                                          found.over_budget, tuple(found.shapes), pairs))

    def record(self, batch: StepBatch, budget_bytes: int | None = None, workspace_tokens: int | None = None,
               budget_stable: tuple[int, int | None] = (0, None)) -> Plan:
        """A plan of these settings without its chunks (``fast.ShapesPeak`` reads only the settings)."""
        if self.viewed:
            batch = self.settings.view(batch)
        if workspace_tokens is None:
            workspace_tokens = self.settings.workspace or batch.num_kv_tokens
        return made_fast(Plan, strategy=self.strategy.name, batch=batch, settings=self.settings,
                         budget_bytes=budget_bytes, workspace_tokens=workspace_tokens, chunks=(),
                         budget_stable=budget_stable, logits_alive=self.logits_alive,
                         layer_kind=self.settings.kind, kind_plans=())

    def plan(self, batch: StepBatch, budget_bytes: int | None) -> PlanShapes:
        step = self.shapes(batch, budget_bytes)
        plan = self.record(batch, budget_bytes, step.workspace_tokens, step.budget_stable)
        return PlanShapes(plan, step.num_chunks, step.over_budget, step.shapes, step.pairs)


def plan_shapes(batch: StepBatch, strategy: str | Strategy, budget_bytes: int | None,
                settings: PlanSettings = PlanSettings()) -> PlanShapes:
    """``make_plan``, by the same strategy code, recording the chunks' count and distinct shapes
    (and, for an engine's chunk loop that keeps two chunks' logits alive, the distinct pairs of
    neighbours) instead of each chunk."""
    return ShapePlanner(strategy, settings).plan(batch, budget_bytes)
