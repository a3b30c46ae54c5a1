"""The indexer's whole memory over a deployment's life, line by line (docs/design.md#the-ledger)."""
from .allocator import AllocatorRun, run_allocator
from .boot import boot_lines
from .build import RunLedger, decode_line, plan_ledger, prefill_line, run_ledger
from .decode import decode_logits_bytes, decode_logits_cols
from .free import FreeMemory, free_from_flags, given_free
from .lines import PHASES, Ledger, LedgerLine

__all__ = ["PHASES", "AllocatorRun", "FreeMemory", "Ledger", "LedgerLine", "RunLedger", "boot_lines", "decode_line",
           "decode_logits_bytes", "decode_logits_cols", "free_from_flags", "given_free", "plan_ledger", "prefill_line",
           "run_allocator", "run_ledger"]
