"""The kernels of a release's chunk loop, timed from their work on a GPU (docs/design.md#time-model).

Each kernel's time follows from what it works on (``timemodel.work.ChunkWork``) and the GPU's SMs,
bandwidth and FP8 rate, with a handful of constants: those read at their source or labelled
"assumed" (``data/field/time_constants.csv``), and those fitted here, at import, to the
published kernel timings (``data/field/kernel_timings.csv``):

- ``logits`` (DeepGEMM's MQA logits): a persistent grid of one CTA per SM takes query blocks
  round-robin; a block costs a fixed part plus one part per 256-token KV tile of its span; the
  kernel lasts as long as its busiest CTA, plus a launch.  Fitted to DeepGEMM's own test rows
  (H200); on another GPU the per-SM parts scale with its FP8 rate per SM, times a rate of its
  own fitted to the logits rows published on it (the H20's).
- ``clean`` (DeepGEMM's ``clean_logits``, where a release asks for it): a launch plus the -inf
  it writes outside the windows, at a fitted share of the HBM bandwidth.
- ``topk`` (vLLM's ``top_k_per_row_prefill``): one 512-thread CTA per row, rows in waves of
  4 per SM, a row's time in proportion to its length, and the whole no faster than its
  histogram passes over the logits at the HBM bandwidth.  Fitted to the published H20 rows.
- ``gather`` (the K gather into the workspace): bytes read and written at the HBM bandwidth.

A GPU's time is modelled only where the logits kernel its engines run is the one fitted here
(DeepGEMM's SM90 kernel, on the sm90 parts); on any other GPU ``time_refusal`` says why, and
which published rows exist on it.  Rows published on other GPUs are checks, never fitted.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..padding import get_rules
from .work import block_tiles
from ..refdata import read_rows
from ..presets import get_gpu

KERNELS = ("gather", "clean", "logits", "topk")
REFERENCE_GPU = "h200"  # the GPU the logits and clean rows were published on
# the GPU whose published rows fix each kernel's constants; rows on any other GPU are checks
FIT_GPU = {"logits": REFERENCE_GPU, "clean": REFERENCE_GPU, "topk": "h20"}
# the MQA-logits kernel a GPU's engines run, by architecture: DeepGEMM picks its SM90 or SM100
# kernel by the device (csrc/jit_kernels/impls/smxx_fp8_mqa_logits.hpp), its SM120 port covers
# sm120 and sm121 (deepseek-ai/DeepGEMM#324), ROCm engines call aiter's fp8_mqa_logits
LOGITS_KERNEL = {"sm90": "DeepGEMM's SM90 fp8_mqa_logits", "sm100": "DeepGEMM's SM100 fp8_mqa_logits",
                 "sm103": "DeepGEMM's SM100 fp8_mqa_logits", "sm120": "DeepGEMM's SM120 fp8_mqa_logits",
                 "sm121": "DeepGEMM's SM120 fp8_mqa_logits", "gfx942": "aiter's fp8_mqa_logits",
                 "gfx950": "aiter's fp8_mqa_logits"}


@lru_cache(maxsize=1)  # read for every chunk a time is asked of
def _constants() -> dict[tuple[str, str], dict]:
    return {(r["name"], r["gpu"]): r for r in read_rows("field", "time_constants.csv")}


def constant(name: str, gpu: str = "") -> float:
    """One constant of ``data/field/time_constants.csv`` (``gpu``: for a per-GPU constant)."""
    try:
        return float(_constants()[(name, gpu)]["value"])
    except KeyError:
        where = f" for GPU {gpu!r}" if gpu else ""
        raise KeyError(f"{name!r}{where}: not in data/field/time_constants.csv") from None


def assumed_constants() -> list[str]:
    """The names of the constants labelled "assumed"."""
    return sorted(name for (name, _), r in _constants().items() if r["status"] == "assumed")


@dataclass(frozen=True)
class GpuRates:
    """What the kernels' times depend on in a GPU."""

    name: str
    sm_count: int
    hbm_tbps: float
    fp8_tflops: float | None  # dense FP8 peak; None: not known (the logits cannot be timed)
    arch: str = "sm90"

    @property
    def sm_speed(self) -> float:
        """FP8 rate per SM against the reference GPU's (1.0 on an H200)."""
        why = time_refusal(self.name)
        if why:
            raise ValueError(why)
        ref = gpu_rates(REFERENCE_GPU)
        return (self.fp8_tflops / self.sm_count) / (ref.fp8_tflops / ref.sm_count)


@lru_cache(maxsize=None)
def gpu_rates(name: str) -> GpuRates:
    gpu = get_gpu(name)
    try:
        fp8 = constant("fp8_dense_tflops", gpu.name)
    except KeyError:
        fp8 = None
    return GpuRates(gpu.name, int(gpu.sm_count), float(gpu.hbm_tbps), fp8, gpu.arch or "sm90")


# ----------------------------------------------------------------------------- the kernels

def logits_us(tiles: np.ndarray, gpu: GpuRates, fit: "KernelFit") -> float:
    """DeepGEMM's MQA logits over query blocks with ``tiles`` KV tiles each."""
    if len(tiles) == 0:
        return 0.0
    per_block = fit.logits_block_us + tiles * fit.logits_tile_us
    busiest = _busiest(per_block, gpu.sm_count)
    return fit.logits_launch_us + busiest / fit.logits_speed(gpu)


def _busiest(per_block: np.ndarray, ctas: int) -> float:
    """The largest sum over one CTA when blocks go to CTAs round-robin."""
    pad = -len(per_block) % ctas
    grid = np.concatenate([per_block, np.zeros(pad)]).reshape(-1, ctas)
    return float(grid.sum(axis=0).max())


def logits_us_each(tiles: list[np.ndarray], gpu: GpuRates, fit: "KernelFit") -> np.ndarray:
    """``logits_us`` of many calls at once (a plan's chunks): each call's blocks go round-robin
    to its own CTAs, summed in the same order, so each time is the one ``logits_us`` gives."""
    counts = np.array([len(t) for t in tiles], dtype=np.int64)
    if not counts.any():
        return np.zeros(len(tiles))
    ctas = gpu.sm_count
    per_block = fit.logits_block_us + np.concatenate(tiles) * fit.logits_tile_us
    call = np.repeat(np.arange(counts.size), counts)
    local = np.arange(call.size) - np.repeat(np.cumsum(counts) - counts, counts)
    per_cta = np.bincount(call * ctas + local % ctas, weights=per_block, minlength=counts.size * ctas)
    busiest = per_cta.reshape(counts.size, ctas).max(axis=1)
    return np.where(counts > 0, fit.logits_launch_us + busiest / fit.logits_speed(gpu), 0.0)


def clean_us(outside_cells: int, gpu: GpuRates, fit: "KernelFit") -> float:
    """DeepGEMM's clean_logits: -inf written to every cell outside the windows."""
    return fit.clean_launch_us + 4 * outside_cells / (fit.clean_bandwidth_share * gpu.hbm_tbps * 1e6)


def topk_us(row_lens: np.ndarray, topk: int, gpu: GpuRates, fit: "KernelFit") -> float:
    """vLLM's per-row top-k: waves of resident CTAs, each row's time by its length; a row no
    longer than top-k only writes its indices."""
    if len(row_lens) == 0:
        return 0.0
    resident = gpu.sm_count * int(constant("topk_ctas_per_sm"))
    long_rows = np.where(row_lens > topk, row_lens, 0)
    pad = -len(long_rows) % resident
    waves = np.concatenate([long_rows, np.zeros(pad, dtype=long_rows.dtype)]).reshape(-1, resident)
    latency = float(waves.max(axis=1).sum()) * fit.topk_ns_per_element * 1e-3
    traffic = fit.topk_passes * 4 * float(long_rows.sum()) / (gpu.hbm_tbps * 1e6)
    return fit.topk_launch_us + max(latency, traffic)


def topk_us_each(row_lens: list[np.ndarray], topk: int, gpu: GpuRates, fit: "KernelFit") -> np.ndarray:
    """``topk_us`` of many calls at once (a plan's chunks), each from its own rows' waves."""
    counts = np.array([len(r) for r in row_lens], dtype=np.int64)
    if not counts.any():
        return np.zeros(len(row_lens))
    resident = gpu.sm_count * int(constant("topk_ctas_per_sm"))
    rows = np.concatenate(row_lens)
    long_rows = np.where(rows > topk, rows, 0)
    first = np.cumsum(counts) - counts
    waves = -(-counts // resident)  # each call's waves of resident rows (its last one padded)
    call = np.repeat(np.arange(counts.size), waves)
    wave = np.arange(call.size) - np.repeat(np.cumsum(waves) - waves, waves)
    longest = np.maximum.reduceat(long_rows, first[call] + wave * resident)
    there = counts > 0
    at = (np.cumsum(waves) - waves)[there]
    latency_elements = np.zeros(counts.size, dtype=np.int64)
    latency_elements[there] = np.add.reduceat(longest, at)
    read = np.zeros(counts.size, dtype=np.int64)
    read[there] = np.add.reduceat(long_rows, first[there])
    latency = latency_elements.astype(np.float64) * fit.topk_ns_per_element * 1e-3
    traffic = fit.topk_passes * 4 * read.astype(np.float64) / (gpu.hbm_tbps * 1e6)
    return np.where(there, fit.topk_launch_us + np.maximum(latency, traffic), 0.0)


def gather_us(tokens: int, bytes_per_token: int, gpu: GpuRates) -> float:
    """The K gather: each token's bytes read from the cache and written to the workspace."""
    if tokens == 0:
        return 0.0
    moved = constant("gather_passes") * tokens * bytes_per_token
    return constant("gather_launch_us") + moved / (gpu.hbm_tbps * 1e6)


# ----------------------------------------------------------------------------- published rows

def deepgemm_test_windows(layout: str, seq_len: int, seq_len_kv: int) -> tuple[np.ndarray, np.ndarray]:
    """``ks``, ``ke`` as a published logits row lays them out: ``deepgemm-test-cp0`` DeepGEMM's
    causal prefix (ks = 0, ke = i + SKV - S), ``deepgemm-test-cp1`` its context-parallel
    pattern (generate_cp_test_data), ``flaggems-full`` every row the whole K (ks = 0, ke = SKV)."""
    if layout == "deepgemm-test-cp0":
        return np.zeros(seq_len, dtype=np.int64), np.arange(seq_len, dtype=np.int64) + (seq_len_kv - seq_len)
    if layout == "deepgemm-test-cp1":
        half, cp_size = seq_len // 2, seq_len_kv // seq_len
        cp_id = cp_size // 3
        i = np.arange(half, dtype=np.int64)
        ke = np.concatenate([cp_id * half + i, (cp_size * 2 - 1 - cp_id) * half + i])
        return np.zeros(seq_len, dtype=np.int64), ke
    if layout == "flaggems-full":
        return np.zeros(seq_len, dtype=np.int64), np.full(seq_len, seq_len_kv, dtype=np.int64)
    raise ValueError(f"layout {layout!r}: not a published logits layout")


# logits rows timed with the clean kernel after them (the op called with clean_logits=True)
WITH_CLEAN = ("flaggems-full",)


def published_timings(kernel: str | None = None, gpu: str | None = None) -> list[dict]:
    """The published kernel timings (``data/field/kernel_timings.csv``), numbers as numbers;
    ``kernel``, ``gpu``: only those of that kernel, on that GPU."""
    rows = []
    for r in read_rows("field", "kernel_timings.csv"):
        if (kernel is None or r["kernel"] == kernel) and (gpu is None or r["gpu"] == gpu):
            rows.append({k: (float(v) if v and k in ("seq_len", "seq_len_kv", "heads", "head_dim", "rows",
                                                     "row_len", "topk", "us") else v) for k, v in r.items()})
    return rows


def _fit_rows(kernel: str) -> list[dict]:
    """The rows that fix a kernel's constants: those published on its ``FIT_GPU``."""
    return published_timings(kernel, FIT_GPU[kernel])


def _row_work(r: dict):
    """(tiles per query block, cells outside the windows) of a published logits row: the clean
    kernel writes each row's padded width (v2.1.1: align(SKV + 256, 4)) outside its window."""
    s, skv = int(r["seq_len"]), int(r["seq_len_kv"])
    ks, ke = deepgemm_test_windows(r["layout"], s, skv)
    ke = np.minimum(ke, skv)
    stride = get_rules("2.1").row_stride(skv)
    return block_tiles(ks, ke, int(r["heads"])), s * stride - int((ke - ks).sum())


def _topk_row_lens(r: dict) -> np.ndarray:
    """Each row's length in a published top-k row: ``rows`` every row full; ``causal-tail`` a
    prompt's last rows, row i seeing ``row_len - rows + i + 1`` columns."""
    n, width = int(r["rows"]), int(r["row_len"])
    if r["layout"] == "causal-tail":
        return width - n + 1 + np.arange(n, dtype=np.int64)
    return np.full(n, width, dtype=np.int64)


@dataclass(frozen=True)
class KernelFit:
    logits_launch_us: float
    logits_block_us: float  # per query block, on the reference GPU's SM
    logits_tile_us: float  # per 256-token KV tile of a block (BLOCK_QH rows x heads x D), same
    clean_launch_us: float
    clean_bandwidth_share: float  # of the HBM bandwidth
    topk_launch_us: float
    topk_ns_per_element: float  # one CTA's time per element of its row
    topk_passes: float  # reads of each logit from HBM (histogram passes not served by L2)
    # per GPU with published logits rows of its own: its rate against its FP8 rate per SM
    logits_gpu_rates: tuple[tuple[str, float], ...] = ()

    def logits_speed(self, gpu: GpuRates) -> float:
        """A GPU's SM against the reference GPU's, in the logits kernel: its FP8 rate per SM,
        times its own fitted rate where its rows were published (1.0 elsewhere)."""
        return gpu.sm_speed * dict(self.logits_gpu_rates).get(gpu.name, 1.0)


def _fit_logits(rows: list[dict], gpu: GpuRates) -> tuple[float, float, float]:
    """Least squares of launch + busiest CTA's (blocks x block + tiles x tile) on the rows; the
    busiest CTA is found again after each fit (it depends on the constants only weakly)."""
    works = [_row_work(r)[0] for r in rows]
    block, tile = 0.0, 1.0
    for _ in range(3):
        xs = []
        for tiles in works:
            pad = -len(tiles) % gpu.sm_count
            t = np.concatenate([tiles, np.zeros(pad, dtype=tiles.dtype)]).reshape(-1, gpu.sm_count)
            n = np.concatenate([np.ones(len(tiles)), np.zeros(pad)]).reshape(-1, gpu.sm_count)
            c = int((n.sum(axis=0) * block + t.sum(axis=0) * tile).argmax())
            xs.append([1.0, n[:, c].sum(), t[:, c].sum()])
        (launch, block, tile), *_ = np.linalg.lstsq(np.array(xs), np.array([r["us"] for r in rows]), rcond=None)
    return float(launch), float(block), float(tile)


def _fit_smallest_worst_error(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) of a + b x with the smallest largest relative error over the rows: the clean
    kernel's times are a few microseconds, where least squares leaves the short rows worst off.
    A grid around the least-squares solution, refined twice."""
    (a0, b0), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(x), x]), y, rcond=None)
    centre, span = np.array([a0, b0]), np.abs(np.array([a0, b0])) + 1e-9
    for _ in range(3):
        a = np.linspace(centre[0] - span[0], centre[0] + span[0], 201)
        b = np.linspace(centre[1] - span[1], centre[1] + span[1], 201)
        worst = np.abs((a[:, None, None] + b[None, :, None] * x) / y - 1).max(axis=2)
        i, j = np.unravel_index(worst.argmin(), worst.shape)
        centre, span = np.array([a[i], b[j]]), span / 20
    return float(centre[0]), float(centre[1])


def _fit(logits_rows: list[dict], clean_rows: list[dict]) -> KernelFit:
    ref = gpu_rates(REFERENCE_GPU)
    launch, block, tile = _fit_logits(logits_rows, ref)
    c_launch, c_inverse_share = _fit_smallest_worst_error(
        np.array([4 * _row_work(r)[1] / (ref.hbm_tbps * 1e6) for r in clean_rows]),
        np.array([r["us"] for r in clean_rows]))
    # top-k: the one-row time fixes a CTA's time per element (after an assumed launch, the same as
    # the gather's); the 2048-row time, where the rows far outnumber the resident CTAs, fixes
    # the passes over HBM; the 32- and 64-row figures are left as checks
    topk_rows = sorted(_fit_rows("topk"), key=lambda r: r["rows"])
    t_launch = constant("gather_launch_us")
    one, many = topk_rows[0], topk_rows[-1]
    ns = (one["us"] - t_launch) / one["row_len"] * 1e3
    gpu = gpu_rates(many["gpu"])
    passes = (many["us"] - t_launch) * gpu.hbm_tbps * 1e6 / (4 * many["rows"] * many["row_len"])
    return KernelFit(launch, block, tile, c_launch, float(1 / c_inverse_share), t_launch, ns, float(passes))


@lru_cache(maxsize=1)
def fitted() -> KernelFit:
    """The fitted constants, from the rows published on each kernel's ``FIT_GPU``, and each other
    GPU's logits rate from the logits rows published on it."""
    return _with_gpu_rates(_fit(_fit_rows("logits"), _fit_rows("clean")), published_timings("logits"))


def _with_gpu_rates(fit: KernelFit, logits_rows: list[dict]) -> KernelFit:
    by_gpu: dict[str, list[dict]] = {}
    for r in logits_rows:
        if r["gpu"] != FIT_GPU["logits"]:
            by_gpu.setdefault(r["gpu"], []).append(r)
    return replace(fit, logits_gpu_rates=tuple((g, _fit_gpu_rate(rows, fit)) for g, rows in sorted(by_gpu.items())))


def _fit_gpu_rate(rows: list[dict], fit: KernelFit) -> float:
    """A GPU's logits rate against its FP8 rate per SM: the factor on its busiest CTA's scaled
    time that fits its rows best (least squares through the origin, net of the launch and, where
    timed with it, the clean kernel)."""
    gpu, scaled = gpu_rates(rows[0]["gpu"]), replace(fit, logits_gpu_rates=())
    x, y = [], []
    for r in rows:
        tiles, outside = _row_work(r)
        x.append(logits_us(tiles, gpu, scaled) - fit.logits_launch_us)
        y.append(r["us"] - fit.logits_launch_us - (clean_us(outside, gpu, fit) if r["layout"] in WITH_CLEAN else 0.0))
    x, y = np.array(x), np.array(y)
    return float((x * x).sum() / (x * y).sum())  # a speed: the inverse of the time's factor


def _held_out_us(kernel: str, index: int) -> float:
    """A fitted row's modelled time with the constants fitted to the other rows of its kernel:
    how well the model predicts a shape it was not fitted to."""
    logits, clean = _fit_rows("logits"), _fit_rows("clean")
    rows = logits if kernel == "logits" else clean
    others = rows[:index] + rows[index + 1:]
    fit = _fit(others, clean) if kernel == "logits" else _fit(logits, others)
    return _row_us(rows[index], fit)


def _row_us(r: dict, fit: KernelFit) -> float:
    """The modelled time of one published row, on the GPU it was published on."""
    gpu = gpu_rates(r["gpu"])
    if r["kernel"] == "topk":
        return topk_us(_topk_row_lens(r), int(r["topk"]), gpu, fit)
    tiles, outside = _row_work(r)
    if r["kernel"] == "clean":
        return clean_us(outside, gpu, fit)
    clean = clean_us(outside, gpu, fit) if r["layout"] in WITH_CLEAN else 0.0
    return logits_us(tiles, gpu, fit) + clean


def _shape(r: dict) -> str:
    if r["kernel"] == "topk":
        causal = " causal" if r["layout"] == "causal-tail" else ""
        return f"{int(r['rows'])} rows x {int(r['row_len'])}{causal}, k={int(r['topk'])}"
    heads = f" H={int(r['heads'])}" if r["kernel"] == "logits" else ""
    clean = " +clean" if r["layout"] in WITH_CLEAN else ""
    return f"S={int(r['seq_len'])} SKV={int(r['seq_len_kv'])}{heads} {r['layout'].split('-')[-1]}{clean}"


# how the rows of each kernel's FIT_GPU were used
FITTED = {"logits": "fitted (3 constants, 9 rows)", "clean": "fitted (2 constants, 8 rows, smallest worst error)"}


def _use(r: dict) -> str:
    if r["kernel"] == "logits" and r["gpu"] != FIT_GPU["logits"]:
        n = len(published_timings("logits", r["gpu"]))
        return f"fitted (the {r['gpu'].upper()}'s logits rate, 1 constant, {n} rows)"
    if r["gpu"] != FIT_GPU[r["kernel"]]:
        return "check"
    if r["kernel"] in FITTED:
        return FITTED[r["kernel"]]
    return "fixes a constant" if r["rows"] in (1, 2048) else "check"


def _held_out_rate_us(r: dict, rows: list[dict]) -> float:
    """A logits row on a GPU with its own fitted rate, modelled with the rate fitted to that
    GPU's other rows."""
    others = [o for o in rows if o is not r]
    return _row_us(r, _with_gpu_rates(_fit(_fit_rows("logits"), _fit_rows("clean")), others))


@lru_cache(maxsize=1)
def _checks() -> tuple[dict, ...]:
    fit, rows = fitted(), published_timings()
    logits_rows = [r for r in rows if r["kernel"] == "logits"]
    out = []
    seen: dict[str, int] = {}
    for r in rows:
        use, held_out = _use(r), None
        if r["kernel"] in FITTED and r["gpu"] == FIT_GPU[r["kernel"]]:  # its error when fitted without it
            index = seen[r["kernel"]] = seen.get(r["kernel"], -1) + 1
            held_out = _held_out_us(r["kernel"], index) / r["us"] - 1
        elif r["kernel"] == "logits":
            held_out = _held_out_rate_us(r, logits_rows) / r["us"] - 1
        us = _row_us(r, fit)
        out.append({"kernel": r["kernel"], "gpu": r["gpu"], "shape": _shape(r), "published_us": r["us"],
                    "modelled_us": us, "error": us / r["us"] - 1, "use": use,
                    # the row's error when the constants are fitted without it (None: not fitted to it)
                    "held_out_error": held_out, "source": r["source"]})
    return tuple(out)


def published_checks() -> list[dict]:
    """Every published kernel timing against the model, on the GPU it was published on: shape,
    published, modelled, error, and whether the constants were fitted to the row."""
    return [dict(c) for c in _checks()]


@lru_cache(maxsize=None)
def error_band(gpu: str = REFERENCE_GPU) -> dict[str, tuple[float, float]]:
    """Per kernel, the spread of published / modelled over the kernel's published rows on
    ``gpu`` or, where it has none, on the GPUs of its architecture (for a row the constants
    were fitted to: modelled with them fitted to the other rows): multiply a modelled time by
    these to get the band the published checks allow (1.0 where none)."""
    arch = gpu_rates(gpu).arch
    band: dict[str, tuple[float, float]] = {}
    for kernel in KERNELS:
        rows = [c for c in _checks() if c["kernel"] == kernel]
        rows = [c for c in rows if c["gpu"] == gpu] or [c for c in rows if gpu_rates(c["gpu"]).arch == arch]
        ratios = [1 / (1 + (c["error"] if c["held_out_error"] is None else c["held_out_error"])) for c in rows]
        band[kernel] = (min(ratios), max(ratios)) if ratios else (1.0, 1.0)
    return band


# ----------------------------------------------------------------------------- GPUs not timed

@lru_cache(maxsize=None)  # asked for every plan a time is modelled for
def time_refusal(gpu: str) -> str | None:
    """Why a GPU's time is not modelled, in one line (None: it is): the logits kernel it runs has
    no published timing the constants were fitted to, or no dense FP8 rate to scale them by.
    The line names the published rows that exist on it; its memory is planned all the same."""
    rates = gpu_rates(gpu)
    fitted_arch = gpu_rates(FIT_GPU["logits"]).arch
    if rates.arch == fitted_arch and rates.fp8_tflops is not None:
        return None
    fitted_to = f"{LOGITS_KERNEL[fitted_arch]} on an {FIT_GPU['logits'].upper()}"
    if rates.arch == fitted_arch:
        why = f"no dense FP8 rate in data/field/time_constants.csv to scale the logits rates fitted to {fitted_to}"
    else:
        kernel = LOGITS_KERNEL.get(rates.arch, "its MQA-logits kernel")
        why = (f"no published timing of the logits kernel it runs ({kernel}) was found; the model's "
               f"logits rates are fitted to {fitted_to}")
    return (f"GPU {rates.name!r} ({rates.arch}): its time is not modelled: {why}; published on it: "
            f"{published_on(rates.name)}; its memory is planned as on any GPU (plan, frontier, auto)")


def published_on(gpu: str) -> str:
    """The published timings on a GPU, in a few words: rows per kernel and where from."""
    groups: dict[str, list[str]] = {}
    for r in published_timings(gpu=gpu):
        groups.setdefault(r["kernel"], []).append(_short(r["source"]))
    for r in read_rows("field", "chunk_overhead.csv"):
        if r["gpu"].lower() == gpu:
            groups.setdefault("chunk-count", []).append(_short(r["source"]))
    if not groups:
        return "none"
    parts = [f"{len(srcs)} {kernel} row{'s' if len(srcs) > 1 else ''} ({', '.join(dict.fromkeys(srcs))})"
             for kernel, srcs in groups.items()]
    return "; ".join(parts) + ", checks only"


def _short(url: str) -> str:
    """owner/repo#N of a GitHub pull-request or issue address."""
    parts = url.removeprefix("https://github.com/").split("/")
    return f"{parts[0]}/{parts[1]}#{parts[3]}" if len(parts) >= 4 else url
