"""Prompt lengths of a mixed-length workload: vLLM bench's random range ratio and explicit mixes.

``random_range_ratio`` R follows vLLM's benchmark, random dataset
(``vllm/benchmarks/datasets/utils.py``, ``get_sampling_params``, called by ``RandomDataset.sample``
in ``vllm/benchmarks/datasets/datasets.py``; vLLM 0.33.0): every input length is drawn at once,
``numpy.random.default_rng(seed).integers(low, high + 1, size=num_prompts)`` with
``low = floor(ISL x (1 - R))`` and ``high = ceil(ISL x (1 + R))``, R in [0, 1), seed 0 by default.
Two differences, both said in docs/design.md#mixed-lengths: the benchmark subtracts its tokenizer's
special tokens from ISL first (here there is no tokenizer: none), and a plain ``--random-range-ratio``
spreads the output lengths too (here OSL stays fixed, as the benchmark's
``{"input": R, "output": 0}`` form does).

A mix is ours: ``((share, length), ...)``, written "0.1x131072" (several joined by "+"): for each
entry, ceil(share x prompts) prompts have that length exactly, at places drawn from the same seed
after the lengths (a permutation of the prompts); the rest keep their ISL draw.

An arrival order is ours too: the same drawn lengths sent in another order (the k-th prompt sent
takes the k-th length), to look for a worse step than the draw's order gives (``ORDERS``).
"""
from __future__ import annotations

import math

from ..checks import BadValue, check_int


def check_range_ratio(value) -> float:
    """R as a float in [0, 1), vLLM bench's rule, or BadValue."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise BadValue("random_range_ratio", f"random_range_ratio {value!r}: must be a number in [0, 1) "
                                             "(vLLM bench's rule)")
    return float(value)


def length_bounds(isl: int, ratio: float) -> tuple[int, int]:
    """The closed range a prompt's length is drawn from (vLLM's ``get_sampling_params``)."""
    return math.floor(isl * (1 - ratio)), math.ceil(isl * (1 + ratio))


def longest_isl(max_len: int, ratio: float) -> int:
    """The largest ISL whose every drawn length fits ``max_len`` (ceil(ISL x (1 + R)) <= max_len)."""
    isl = math.floor(max_len / (1 + ratio))
    # the division's float rounding, either way
    while length_bounds(isl, ratio)[1] > max_len:
        isl -= 1
    while length_bounds(isl + 1, ratio)[1] <= max_len:
        isl += 1
    return isl


def parse_mix(mix) -> tuple[tuple[float, int], ...]:
    """A mix as ((share, length), ...), from that or from its text ("0.1x131072+0.05x65536"; ""
    or None: no mix).  Shares in (0, 1] adding up to at most 1, lengths whole numbers >= 1."""
    if mix is None:
        return ()
    if isinstance(mix, str):
        text = mix.strip().lower()
        entries = []
        for part in text.split("+") if text else []:
            share, _, length = part.partition("x")
            try:
                entries.append((float(share), int(length)))
            except ValueError:
                raise BadValue("mix", f"mix {mix!r}: expected SHARExLENGTH[+SHARExLENGTH...], "
                                      "e.g. 0.1x131072") from None
        mix = entries
    try:
        pairs = tuple((share, length) for share, length in mix)
    except (TypeError, ValueError):
        raise BadValue("mix", f"mix {mix!r}: expected (share, length) pairs or SHARExLENGTH text") from None
    out = []
    for share, length in pairs:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise BadValue("mix", f"mix share {share!r}: must be a number in (0, 1]")
        out.append((float(share), check_int("mix length", length, 1)))
    if sum(s for s, _ in out) > 1 + 1e-9:
        raise BadValue("mix", f"mix {mix_text(out)}: its shares add up to more than 1")
    return tuple(out)


def mix_text(mix) -> str:
    """The text of a mix ("" for none): how rows, titles and the command line name it."""
    return "+".join(f"{share:g}x{length}" for share, length in mix)


def mix_prompts(mix, num_prompts: int) -> list[int]:
    """How many prompts each entry of a mix takes: ceil(share x prompts), so a share never rounds
    to no prompt at all; BadValue when together they take more prompts than are sent."""
    counts = [math.ceil(share * num_prompts - 1e-9) for share, _ in mix]
    if sum(counts) > num_prompts:
        raise BadValue("mix", f"mix {mix_text(mix)}: takes {sum(counts)} of {num_prompts} prompts "
                              "(each share rounds up to whole prompts)")
    return counts


def draw_lengths(isl: int, num_prompts: int, ratio: float, mix, seed: int) -> tuple[int, ...]:
    """Every prompt's length, in the order the prompts are sent."""
    import numpy as np

    rng = np.random.default_rng(seed)
    low, high = length_bounds(isl, ratio)
    # the same draw as vLLM bench's input lengths for this seed (its first draw from the generator)
    lens = [int(n) for n in rng.integers(low, high + 1, size=num_prompts)]
    if mix:
        places = iter(int(i) for i in rng.permutation(num_prompts))
        for (_, length), count in zip(mix, mix_prompts(mix, num_prompts)):
            for _ in range(count):
                lens[next(places)] = length
    return tuple(lens)


# "drawn": the draw's own order; the others are orders a search tries against it
# (docs/design.md#mixed-lengths)
ORDERS = ("drawn", "longest-first", "shortest-first", "long-together")


def check_order(value) -> str:
    """An arrival order's name, or BadValue naming the ones there are."""
    if not isinstance(value, str) or value not in ORDERS:
        raise BadValue("order", f"order {value!r}: must be one of {', '.join(ORDERS)}")
    return value


def arrange(lens, order: str, isl: int, concurrency: int) -> tuple[int, ...]:
    """The same lengths in the order ``order`` sends them.

    longest-first / shortest-first: sorted.  long-together: the prompts longer than ISL (a mix's
    long prompts, the upper half of a range), the longest, at most one per client, sent back to
    back from the second wave's first prompt (or as late as fits), longest first; the others
    keep their drawn order around them."""
    lens = tuple(lens)
    if order == "drawn":
        return lens
    if order != "long-together":
        return tuple(sorted(lens, reverse=order == "longest-first"))
    by_length = sorted((i for i, n in enumerate(lens) if n > isl), key=lambda i: -lens[i])
    burst = set(by_length[:concurrency])
    rest = [n for i, n in enumerate(lens) if i not in burst]
    start = min(concurrency, len(rest))
    return tuple(rest[:start] + [lens[i] for i in by_length[:concurrency]] + rest[start:])
