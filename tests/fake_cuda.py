"""An emulated CUDA device for measure mode on a CPU (tests): the real executor runs
on ``meta`` tensors (nothing computed or stored), and every storage it creates goes
through a model of PyTorch's caching allocator (``indexer_lib.memory.allocator``) with a
capacity: past it, the allocation raises ``torch.OutOfMemoryError`` inside the
executor, as cudaMalloc failing would.  Freed tensors stay reserved until
``empty_cache``, so a measurer that leaks tensors or never empties the cache shows
reserved bytes above the baseline."""
from __future__ import annotations

import time
import weakref

import torch
from indexer_lib.memory.allocator import CachingAllocatorModel
from indexer_lib.run.inputs import make_inputs
from indexer_lib.run.executor import execute
from indexer_lib.run.tracer import AllocationTracker

GIB = 2**30


class _Allocations(AllocationTracker):
    """Sends every new meta storage an op returns through the device's allocator."""

    def __init__(self, device: "EmulatedCuda"):
        super().__init__("meta")
        self.device = device

    def _track(self, t: torch.Tensor, given: set[int]) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in given or key in self.device.live:
            return
        handle = self.device.malloc(storage.nbytes())  # may raise OutOfMemoryError
        self.device.live[key] = handle
        weakref.finalize(storage, self.device.release, key)


class EmulatedCuda:
    """The device layer ``sweep.rows.Measurer`` expects (see indexer_lib.run.device)."""

    def __init__(self, capacity_bytes: int, name: str = "emulated CUDA (meta + allocator model)"):
        self.capacity = capacity_bytes
        self.name = name
        self.allocator = CachingAllocatorModel()
        self.live: dict[int, int] = {}  # storage -> allocator handle
        self.ooms = 0
        self.mode = _Allocations(self)

    # allocator ------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        a = self.allocator
        handle = a.malloc(nbytes)
        if a.reserved > self.capacity:  # as PyTorch: free the cached blocks, retry once
            a.free(handle)
            a.empty_cache()
            handle = a.malloc(nbytes)
            if a.reserved > self.capacity:
                a.free(handle)
                a.empty_cache()
                self.ooms += 1
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {nbytes / GIB:.2f} GiB. GPU 0 has a "
                    f"total capacity of {self.capacity / GIB:.2f} GiB of which "
                    f"{(self.capacity - a.reserved) / GIB:.2f} GiB is free. (emulated)")
        return handle

    def release(self, key: int) -> None:
        self.allocator.free(self.live.pop(key))

    # the device layer -------------------------------------------------------------
    def mem_get_info(self) -> tuple[int, int]:
        return self.capacity - self.allocator.reserved, self.capacity

    def allocate(self, nbytes: int):
        with self.mode:
            return torch.empty(nbytes, dtype=torch.uint8, device="meta")

    def make_inputs(self, batch, model: str, seed: int):
        with self.mode:
            return make_inputs(batch, model, seed=seed, device="meta")

    def execute(self, plan, inputs, backend, topk_rows: int):
        with self.mode:
            return execute(plan, inputs, backend=backend, device="meta", topk_rows=topk_rows)

    def elapsed_ms(self, fn) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    def synchronize(self) -> None:
        pass

    def empty_cache(self) -> None:
        self.allocator.empty_cache()

    def memory_allocated(self) -> int:
        return self.allocator.allocated

    def memory_reserved(self) -> int:
        return self.allocator.reserved

    def max_memory_allocated(self) -> int:
        return self.allocator.peak_allocated

    def reset_peak_memory_stats(self) -> None:
        self.allocator.peak_allocated = self.allocator.allocated
