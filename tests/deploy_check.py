"""An independent check of a deploy line: the release's own chunker at the value the line sets,
over every step of the same workloads, by the frontier's worst-step search (planned by shapes,
not by ``auto``'s plans)."""
from __future__ import annotations

from indexer_lib.engines import get_engine, process_budget, profile_run_logits_bytes
from indexer_lib.plan import PlanSettings
from indexer_lib.search.worst_step import worst_step


def knob_value(line: str, profile) -> float | None:
    """The value a deploy line sets, checked to be the release's own knob (None: nothing to set)."""
    if line == f"{profile.name}: nothing to set (its own chunker fits as it is)":
        return None
    env, _, value = line.partition("=")
    assert env == profile.budget_env, line
    return float(value)


def memory_needed(line: str, release: str, schedules, free_bytes: int, model: str = "glm-5") -> int:
    """What the release needs free at its worst step with the line deployed: its own chunker's
    transient peak (two chunks' logits alive; the larger of its replayed path and the H200
    kernels' temporaries) plus the profile-run reservation it gives up below its default."""
    profile = get_engine(release)
    value = knob_value(line, profile)
    budget = process_budget(profile, free_bytes, value=value)
    shortfall = max(0, profile_run_logits_bytes(profile) - profile_run_logits_bytes(profile, value))
    backends = ["deepgemm"] + (["replay"] if profile.path else [])
    peak = max(worst_step(schedule, "engine", budget, PlanSettings(model, profile, temporaries=t)).peak_transient_bytes
               for schedule in schedules for t in backends)
    return peak + shortfall
