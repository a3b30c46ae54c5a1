"""Layer 10, the ledger: the indexer's whole memory over a deployment's life, line by line
(docs/design.md#the-ledger).

- ``lines``: a line (phase, name, bytes, source) and the ledger's verdict;
- ``boot``: what the server reserves at boot (a decode step's paged logits: ``memory.decode``);
- ``allocator``: the caching allocator across a run; ``free``: the memory free when a step runs,
  from the server's flags;
- ``build``: the ledger of one planned step or of a run's steps; ``deployment``: of a server's
  flags and a workload (``indexer-lab deploy``).
"""
from .allocator import AllocatorRun, run_allocator
from .boot import boot_lines
from .build import RunLedger, ServerSizes, decode_line, plan_ledger, prefill_line, run_ledger
from ..memory.decode import decode_logits_bytes, decode_logits_cols
from .free import FreeMemory, free_from_flags, given_free
from .lines import PHASES, Ledger, LedgerLine

__all__ = ["PHASES", "AllocatorRun", "FreeMemory", "Ledger", "LedgerLine", "RunLedger", "ServerSizes", "boot_lines",
           "decode_line",
           "decode_logits_bytes", "decode_logits_cols", "free_from_flags", "given_free", "plan_ledger", "prefill_line",
           "run_allocator", "run_ledger"]
