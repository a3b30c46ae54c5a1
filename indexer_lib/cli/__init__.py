"""Layer 13, the command line: ``indexer-lab`` (``main``, one module per subcommand:
``plan``, ``time``, ``frontier``, ``run``, ``auto``, ``deploy``, ``replay``, ``reproduce``; ``exits``: the exit
statuses, one meaning each; ``options``: a grid's options made from its settings)
and the device check (``devicecheck``, the one-shot H200 measurement, one module per stage)."""
from .main import build_parser, main

__all__ = ["build_parser", "main"]
