"""A worst step's plan features (``timemodel.features``) and modelled time, each made once per
strategy, settings, step and budget interval (the plan is the same for every budget inside it):
the same worst step recurs across the budgets and workloads of a grid."""
from __future__ import annotations

from ..plan import PlanSettings, Strategy
from ..memory import make_plan
from ..timemodel.features import plan_features
from ..workload import StepBatch
from .caches import PerSettings

_FEATURES = PerSettings(limit=50_000)
_TIMES = PerSettings(limit=50_000)


def step_features(batch: StepBatch, strategy: Strategy, budget_bytes: int | None, settings: PlanSettings,
                  budget_stable: tuple[int, int | None]) -> dict:
    """``plan_features(make_plan(batch, strategy, budget_bytes, settings))``, kept for every budget
    of the interval ``budget_stable`` the plan holds for (``Plan.budget_stable``)."""
    kept = _FEATURES.of((strategy, settings))
    key = (batch.query_lens, batch.seq_lens, budget_stable)
    features = kept.get(key)
    if features is None:
        features = _FEATURES.add(kept, key, plan_features(make_plan(batch, strategy, budget_bytes, settings)))
    return features


def step_time_ms(batch: StepBatch, strategy: Strategy, budget_bytes: int | None, settings: PlanSettings,
                 budget_stable: tuple[int, int | None], time_model) -> float:
    """``time_model.features_ms`` of ``step_features``, kept the same way: a grid's cells and a
    dashboard's budgets share most of their worst steps' plans, and their time is worked out
    from every row's window."""
    kept = _TIMES.of((strategy, settings, time_model))
    key = (batch.query_lens, batch.seq_lens, budget_stable)
    ms = kept.get(key)
    if ms is None:
        features = step_features(batch, strategy, budget_bytes, settings, budget_stable)
        ms = _TIMES.add(kept, key, time_model.features_ms(features))
    return ms
