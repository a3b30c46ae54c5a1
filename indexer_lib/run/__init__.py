"""Layer 7, running a plan on tensors: the path an engine takes, on any device.

- ``inputs``: a step's indexer inputs (q, weights, the K cache) as served, seeded;
- ``metadata``: per chunk, ks/ke per row and the gather's slot map;
- ``executor``: ``execute(plan, inputs)``: gather, logits, top-k per chunk (and the
  exact top-k merge of column-split chunks);
- ``tracer``: the executor on the meta device, every allocation tracked (full-scale
  shapes, no memory);
- ``device``: an OOM-checked CUDA device for measured sweeps;
- ``kernels``: the logits + top-k backends (``reference``: exact, any device;
  ``deepgemm``: DeepGEMM's kernel on an H200).

Nothing is imported here: the modules need torch, the layers below do not.
"""
