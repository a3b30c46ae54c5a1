"""Layer 6, studies over many plans: grids, results and the questions users ask.

- ``grid``: the one grid, made of ``grid_plan``, ``scheduler_settings``, ``deployment`` and
  ``axes``, each a frozen part whose settings are declared with ``setting``;
- ``frontier``: the OOM frontier by model over concurrency x ISL x budget x free memory;
- ``sweep``, ``store``, ``results``: grids run in ``model``, ``trace`` or ``measure``
  mode into a resumable, journalled Parquet store, with provenance;
- ``timemodel``: a modelled H200 time per plan (fitted to measured rows where they exist);
- ``reported``: the field's published allocations, reproduced (``data/field/``), and the
  same failures through the engine releases;
- ``releases``: where each engine release runs out of memory on the field's deployments;
- ``budget_policy``: budgets from free memory (fixed, SGLang's cached, fresh);
- ``reserved``: reserved vs allocated bytes over a long prompt (caching-allocator model);
- ``auto``: the fastest strategy and budget that never OOMs over a workload mix;
- ``mixes``: one long prompt among short ones against one length (the compressed layout's worst case).
"""
