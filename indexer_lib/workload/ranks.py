"""The clients one data-parallel rank serves when a dispatcher deals the requests round robin.

A server of ``ranks`` data-parallel ranks (SGLang's DP attention) runs one scheduler per rank,
and its dispatcher sends each arriving request to the next rank in turn (SGLang's default load
balance method, ``round_robin``; docs/design.md#dp-attention).  The first wave of a closed loop's
clients is dealt one each, so the busiest rank holds ceil(clients / ranks) of them; dealing every
later arrival in turn keeps each rank's share of the arrivals the same, so the model holds that
count: the rank planned is the busiest one, with its share of the prompts (each mix's share
rounded up, as ``lengths.mix_prompts`` does, so a rare long prompt is in it).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the simulator reads this module: no import cycle at run time
    from .simulator import ClosedLoopWorkload


def rank_clients(clients: int, ranks: int) -> int:
    """The clients the busiest of ``ranks`` round-robin ranks holds."""
    return -(-clients // ranks)


def rank_workload(workload: "ClosedLoopWorkload", ranks: int) -> "ClosedLoopWorkload":
    """The workload of the busiest rank: its clients, and its share of the prompts sent."""
    if ranks == 1:
        return workload
    prompts = None if workload.num_prompts is None else rank_clients(workload.num_prompts, ranks)
    return replace(workload, concurrency=rank_clients(workload.concurrency, ranks), num_prompts=prompts)
