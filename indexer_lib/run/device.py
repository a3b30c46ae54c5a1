"""The device layer under ``measure`` mode: everything the measurer asks of a GPU.

``sweep.rows.Measurer`` runs a plan's worst step through an object with these methods
(``CudaDevice`` is the real one; tests drive the same measurer with an emulated
device whose allocations fail with ``torch.OutOfMemoryError`` past a limit):

- ``name``: what the rows record as ``device``;
- ``mem_get_info() -> (free, total)`` bytes, as the driver sees them;
- ``allocate(nbytes)``: a ballast buffer (dropped by the measurer);
- ``make_inputs(batch, model, seed)``, ``execute(plan, inputs, backend, topk_rows)``;
- ``elapsed_ms(fn)``: run ``fn`` once, return its device time;
- ``synchronize()``, ``empty_cache()``, ``memory_allocated()``, ``memory_reserved()``,
  ``max_memory_allocated()``, ``reset_peak_memory_stats()`` (as ``torch.cuda``).
"""
from __future__ import annotations


class CudaDevice:
    """GPU 0 through ``torch.cuda`` and the real executor."""

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("measure mode needs a CUDA GPU, and torch sees none on this "
                               "machine: use mode 'model' or 'trace' here")
        from .inputs import make_inputs
        from .executor import execute

        self.torch, self._execute, self._make_inputs = torch, execute, make_inputs
        self.cuda = torch.cuda
        self.name = torch.cuda.get_device_name(0)

    def mem_get_info(self) -> tuple[int, int]:
        return self.cuda.mem_get_info()

    def allocate(self, nbytes: int):
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")

    def make_inputs(self, batch, model: str, seed: int):
        return self._make_inputs(batch, model, seed, "cuda")

    def execute(self, plan, inputs, backend, topk_rows: int):
        return self._execute(plan, inputs, backend=backend, device="cuda", topk_rows=topk_rows)

    def elapsed_ms(self, fn) -> float:
        start = self.cuda.Event(enable_timing=True)
        end = self.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        self.cuda.synchronize()
        return start.elapsed_time(end)

    def synchronize(self) -> None:
        self.cuda.synchronize()

    def empty_cache(self) -> None:
        # cuBLAS keeps its workspaces in the caching allocator: drop them too, so that
        # reserved bytes can return to the baseline between points
        clear = getattr(self.torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        self.cuda.empty_cache()

    def memory_allocated(self) -> int:
        return self.cuda.memory_allocated()

    def memory_reserved(self) -> int:
        return self.cuda.memory_reserved()

    def max_memory_allocated(self) -> int:
        return self.cuda.max_memory_allocated()

    def reset_peak_memory_stats(self) -> None:
        self.cuda.reset_peak_memory_stats()
