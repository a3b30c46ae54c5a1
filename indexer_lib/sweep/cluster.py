"""Grids on a Ray cluster (``pip install -e ".[cluster]"``; docs/design.md#sweeps-on-a-cluster).

``ordered_map(fn, items, address)`` runs ``fn`` on every item on Ray, a batch of items per Ray
task (a task costs milliseconds to schedule, a grid point microseconds to model), with a
bounded number of batches in flight, and yields the results in the items' order.  The driver
(the caller) stays the only writer of whatever it stores, and writes in the same order as a
local run, so a table made on Ray is the table made locally.  Ray is imported only here and
only when asked for.

``address``: None starts (or joins, when ``RAY_ADDRESS`` is set) a Ray instance on this
machine; ``"auto"`` joins the cluster this machine belongs to (``ray start --head`` on one
node, ``ray start --address HEAD:6379`` on the others); ``"ray://HOST:10001"`` connects a
client to a remote head.  Every node needs this package installed (the same checkout).
"""
from __future__ import annotations

import socket
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator

BATCH = 16  # items per Ray task


def connect(address: str | None = None):
    """The ``ray`` module, connected (ValueError in one line: not installed, or not reachable)."""
    try:
        import ray
    except ImportError:
        raise ValueError('executor "ray" needs Ray: pip install -e ".[cluster]"') from None
    if ray.is_initialized():
        return ray
    _check_listening(address)
    try:
        with warnings.catch_warnings():  # Ray warns before it fails: the error below is the one line
            warnings.simplefilter("ignore")
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
    except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"cannot reach a Ray cluster at {address or 'a new local instance'!r}: "
                         f"{first}") from None
    return ray


def host_port(address: str | None) -> tuple[str, int] | None:
    """The HOST and PORT of an explicit Ray address (``HOST:PORT`` or ``ray://HOST:PORT``);
    None for None, ``auto`` and ``local``.  ValueError naming the rule for anything else."""
    if address is None or address in ("auto", "local"):
        return None
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536) or "/" in host:
        raise ValueError(f"Ray address {address!r}: must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT'")
    return host.strip("[]"), int(port)


def _check_listening(address: str | None, timeout_s: float = 5.0) -> None:
    """ValueError in one line when nothing answers at an explicit address: Ray itself keeps
    retrying such an address for many minutes."""
    where = host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout_s).close()
    except OSError as e:
        raise ValueError(f"cannot reach a Ray cluster at {address!r}: nothing answers at "
                         f"{where[0]}:{where[1]} ({e.strerror or type(e).__name__})") from None


def _run_batch(fn: Callable, batch: list) -> list:
    return [fn(*item) for item in batch]


def ordered_map(fn: Callable, items: Iterable[tuple], address: str | None = None, batch: int = BATCH,
                window: int | None = None, num_gpus: int = 0,
                on_crash: Callable | None = None) -> Iterator:
    """``fn(*item)`` for every item, computed on Ray, yielded in the items' order as each is done.

    ``window``: batches in flight at once (default: twice the cluster's CPUs, or its GPUs with
    ``num_gpus``), so a huge grid never sits whole in the object store.  ``num_gpus``: GPUs
    each Ray task asks for.  A batch whose worker dies (killed, out of memory) runs again,
    up to three times, so nothing is lost or computed twice; with ``on_crash(item, error)``
    it does not run again: each of its items gives ``on_crash``'s result instead.
    """
    ray = connect(address)
    remote = ray.remote(max_retries=0 if on_crash else 3, num_gpus=num_gpus)(_run_batch)
    if window is None:
        resource = "GPU" if num_gpus else "CPU"
        window = max(2, 2 * int(ray.cluster_resources().get(resource, 1) // max(num_gpus, 1)))
    pending: deque = deque()
    items = iter(items)
    while True:
        while len(pending) < window:
            chunk = [item for _, item in zip(range(batch), items)]
            if not chunk:
                break
            pending.append((chunk, remote.remote(fn, chunk)))
        if not pending:
            return
        chunk, ref = pending.popleft()
        try:
            results = ray.get(ref)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.OutOfMemoryError) as e:
            if on_crash is None:
                raise
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            results = [on_crash(item, f"{type(e).__name__}: {first}") for item in chunk]
        yield from results


def gpu_count(address: str | None = None) -> int:
    return int(connect(address).cluster_resources().get("GPU", 0))


def where() -> dict:
    """The node and GPU a Ray task runs on (for a measured row's provenance)."""
    import socket

    import ray

    gpus = ray.get_gpu_ids()
    index = ",".join(str(g) for g in gpus) or None
    return {"node": socket.gethostname(), "gpu_index": index, "gpu_driver": _driver_version(index)}


def _driver_version(index: str | None) -> str | None:
    """The NVIDIA driver of the task's GPU, as nvidia-smi reports it (None without one)."""
    import shutil
    import subprocess

    if index is None or shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "-i", index.split(",")[0], "--query-gpu=driver_version",
                           "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    return (done.stdout.strip() or None) if done.returncode == 0 else None
