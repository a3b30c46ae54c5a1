"""Layer 11, the questions users ask, each answered over many plans and grids.

- ``reported``: the field's published allocations, reproduced (``data/field/``), and the
  same failures through the engine releases;
- ``releases``: where each engine release runs out of memory on the field's deployments;
- ``models``: the indexers of 2026 side by side;
- ``speculative``: which releases send decodes with drafts through the prefill path;
- ``bounds``: how far a worst step is from the worst over more waves, seeds and orders, and
  from the analytic ceiling;
- ``budget_policy``: budgets from free memory (fixed, SGLang's cached, fresh);
- ``reserved``: reserved vs allocated bytes over a long prompt (caching-allocator model);
- ``auto``: the fastest strategy and budget that never OOMs over a workload mix;
- ``mixes``: one long prompt among short ones against one length (the compressed layout's worst case);
- ``layouts``: the compressed layout against the full one.
"""
