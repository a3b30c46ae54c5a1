"""window_topk's contract (tie rule included) and the pre-call input checks, on CPU tensors."""
from __future__ import annotations

import pytest
import torch

from indexer_lib.run.kernels.checks import InputCheckError, check_mqa_logits_inputs, check_tma_alignment
from indexer_lib.memory.topk_bytes import topk_temporaries_bytes
from indexer_lib.run.kernels.topk import window_topk
from naive_indexer import causal_windows, rank


def brute(values: torch.Tensor, lo, hi, k: int, offset):
    """The contract, one row at a time: the naive ranking of columns [lo, hi), as
    indices relative to ``offset``."""
    out = torch.full((values.shape[0], k), -1, dtype=torch.int32)
    for i in range(values.shape[0]):
        a = int(lo[i])
        order = rank(values[i, a:int(hi[i])].numpy(), k)
        found = order >= 0
        out[i, torch.from_numpy(found)] = torch.from_numpy(order[found] + a - int(offset[i]))
    return out


def windows(m, width, g):
    ks = torch.randint(0, width, (m,), generator=g)
    span = torch.randint(0, width + 1, (m,), generator=g)
    ke = torch.minimum(ks + span, torch.tensor(width))
    return ks.to(torch.int32), ke.to(torch.int32)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("levels", [3, 50, None])  # few distinct values: many ties
@pytest.mark.parametrize("block_bytes", [1, 4096, 2**27])  # one row per block .. all rows
def test_full_layout_matches_the_contract(seed, levels, block_bytes):
    g = torch.Generator().manual_seed(seed)
    m, width, k = 17, 40, 7
    if levels is None:
        x = torch.randn(m, width, generator=g)
    else:
        x = torch.randint(0, levels, (m, width), generator=g).to(torch.float32)
    ks, ke = windows(m, width, g)
    expected = brute(x, ks, ke, k, ks)
    garbage = x.clone()
    for i in range(m):  # what the kernel may leave outside the window
        garbage[i, : ks[i]] = float("nan")
        garbage[i, ke[i]:] = float("inf")
    got = window_topk(garbage, ks, ke, k, block_bytes=block_bytes)
    assert got.dtype == torch.int32
    assert torch.equal(got, expected)


@pytest.mark.parametrize("seed", range(4))
def test_compressed_layout_matches_the_contract(seed):
    g = torch.Generator().manual_seed(seed)
    m, width, k = 11, 30, 9
    x = torch.randint(0, 4, (m, width), generator=g).to(torch.float32)
    ks = torch.randint(0, 100, (m,), generator=g).to(torch.int32)
    ke = ks + torch.randint(0, width + 1, (m,), generator=g).to(torch.int32)
    expected = brute(x, torch.zeros(m), ke - ks, k, torch.zeros(m))
    got = window_topk(x.clone(), ks, ke, k, compressed=True, block_bytes=512)
    assert torch.equal(got, expected)


def test_ties_lower_index_wins_where_topk_may_not():
    # all equal: the k lowest columns of each window, in index order
    x = torch.zeros(3, 5000)
    ks = torch.tensor([0, 100, 4000], dtype=torch.int32)
    ke = torch.tensor([5000, 3000, 4003], dtype=torch.int32)
    got = window_topk(x, ks, ke, 2048)
    assert torch.equal(got[0], torch.arange(2048, dtype=torch.int32))
    assert torch.equal(got[1], torch.arange(2048, dtype=torch.int32))
    assert got[2, :3].tolist() == [0, 1, 2] and (got[2, 3:] == -1).all()


def test_k_wider_than_the_tensor_and_empty_windows():
    x = torch.tensor([[1.0, 3.0, 2.0], [5.0, 5.0, 5.0]])
    ks = torch.tensor([0, 1], dtype=torch.int32)
    ke = torch.tensor([3, 1], dtype=torch.int32)
    got = window_topk(x, ks, ke, 5)
    assert got.tolist() == [[1, 2, 0, -1, -1], [-1, -1, -1, -1, -1]]


def test_writes_into_a_given_buffer_and_rejects_bad_arguments():
    x = torch.randn(4, 10)
    ks = torch.zeros(4, dtype=torch.int32)
    ke = torch.full((4,), 10, dtype=torch.int32)
    buf = torch.empty(6, 3, dtype=torch.int32)
    window_topk(x.clone(), ks, ke, 3, out=buf[1:5])
    assert torch.equal(buf[1:5], brute(x, ks, ke, 3, ks))
    with pytest.raises(ValueError, match="out"):
        window_topk(x, ks, ke, 3, out=torch.empty(4, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="k 0"):
        window_topk(x, ks, ke, 0)
    # any strided view works (DeepGEMM's output is one, with a padded row stride)
    xt = x.t().contiguous().t()
    assert not xt.is_contiguous()
    assert torch.equal(window_topk(xt, ks, ke, 3), brute(x, ks, ke, 3, ks))


def test_temporaries_grow_with_rows_then_stop_at_the_block():
    assert topk_temporaries_bytes(0, 100, 10) == 0
    a = topk_temporaries_bytes(10, 4096, 2048)
    b = topk_temporaries_bytes(100, 4096, 2048)
    c = topk_temporaries_bytes(100_000, 4096, 2048, block_bytes=2**20)
    assert a < b
    assert c < 2**20 + 100_000 * 5 * 8 + 4096 * 8 + 1
    assert topk_temporaries_bytes(100, 4096, 2048, ties=True) > b


# ------------------------------------------------------------------------------------- checks

def inputs(m=4, n=256, h=64, d=128):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(m, h, d, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(n, d, generator=g).to(torch.float8_e4m3fn)
    s = torch.ones(n)
    w = torch.randn(m, h, generator=g)
    ks = torch.zeros(m, dtype=torch.int32)
    ke = torch.full((m,), n, dtype=torch.int32)
    return dict(q=q, k=k, k_scale=s, weights=w, ks=ks, ke=ke)


def check(**kw):
    args = inputs()
    opts = {key: kw.pop(key) for key in ("arch_major", "max_seqlen_k", "check_values") if key in kw}
    args.update(kw)
    return check_mqa_logits_inputs(args["q"], args["k"], args["k_scale"], args["weights"],
                                   args["ks"], args["ke"], **opts)


def test_good_inputs_pass_and_report_the_sizes():
    p = check()
    assert (p.rows, p.kv, p.heads, p.head_dim) == (4, 256, 64, 128)
    assert check(q=inputs(h=32)["q"], weights=inputs(h=32)["weights"]).heads == 32


def test_errors_are_value_errors():
    assert issubclass(InputCheckError, ValueError)


@pytest.mark.parametrize("offset,ok", [(0, True), (1, False), (2, False), (3, False), (4, True), (8, True)])
def test_k_scale_slice_offsets(offset, ok):
    """k_scale[off:] is 16-byte aligned only for off % 4 == 0 (fp32)."""
    base = torch.ones(256 + offset)
    assert base.data_ptr() % 16 == 0  # torch's CPU allocator aligns to 64 bytes
    s = base[offset:]
    if ok:
        check(k_scale=s)
    else:
        with pytest.raises(InputCheckError, match=r"k_scale: base address .* off % 4 == 0"):
            check(k_scale=s)


def test_misaligned_k_and_weights():
    raw = torch.empty(257 * 128 + 8, dtype=torch.uint8)
    k = raw[8: 8 + 256 * 128].view(torch.float8_e4m3fn).view(256, 128)
    assert k.is_contiguous() and k.data_ptr() % 16 == 8
    with pytest.raises(InputCheckError, match="^k: base address"):
        check(k=k)
    w = torch.empty(4 * 64 + 2)[2:].view(4, 64)
    with pytest.raises(InputCheckError, match="^weights: base address"):
        check(weights=w)
    # rows 33 floats apart: stride(1) = 1 is fine, the 132-byte row stride is not
    w = torch.randn(4, 65)[:, :64]
    with pytest.raises(InputCheckError, match="^weights: stride 65 of dim 0 is 260 bytes"):
        check(weights=w)
    w = torch.randn(4, 68)[:, :64]  # 272-byte rows: fine for TMA
    check(weights=w)


def test_tma_stride_rule_directly():
    t = torch.empty(8, 33)[:, :32]
    with pytest.raises(InputCheckError, match="multiples of 16 bytes"):
        check_tma_alignment("x", t)
    check_tma_alignment("x", torch.empty(8, 36)[:, :32])


@pytest.mark.parametrize("name,bad,rule", [
    ("q", lambda a: a["q"].to(torch.bfloat16), "q: dtype must be torch.float8_e4m3fn"),
    ("k", lambda a: a["k"].to(torch.float8_e5m2), "k: dtype must be torch.float8_e4m3fn"),
    ("k_scale", lambda a: a["k_scale"].to(torch.float16), "k_scale: dtype must be torch.float32"),
    ("weights", lambda a: a["weights"].to(torch.bfloat16), "weights: dtype must be torch.float32"),
    ("ks", lambda a: a["ks"].to(torch.int64), "ks: dtype must be torch.int32"),
    ("ke", lambda a: a["ke"].to(torch.int64), "ke: dtype must be torch.int32"),
    ("q", lambda a: a["q"].transpose(0, 1).contiguous().transpose(0, 1), "q: must be contiguous"),
    ("k", lambda a: torch.empty(128, 256).to(torch.float8_e4m3fn).t(), "k: must be contiguous"),
    ("k_scale", lambda a: torch.ones(512)[::2], "k_scale: must be contiguous"),
    ("weights", lambda a: a["weights"].t().contiguous().t(), r"weights: stride\(1\) must be 1"),
    ("ks", lambda a: torch.zeros(8, dtype=torch.int32)[::2], "ks: must be contiguous"),
    ("q", lambda a: a["q"][:, :, 0], "q: must be 3-D"),
    ("k", lambda a: a["k"][:, :64].contiguous(), "k: head dim 64 must equal"),
    ("k_scale", lambda a: a["k_scale"][:100], "k_scale: length 100 must equal"),
    ("weights", lambda a: a["weights"][:, :32], r"weights: shape \(4, 32\) must be"),
    ("ke", lambda a: a["ke"][:3], "ke: length 3 must equal"),
    ("q", lambda a: torch.empty(4, 48, 128).to(torch.float8_e4m3fn), "q: H = 48 index heads"),
    ("q", lambda a: torch.empty(4, 16, 128).to(torch.float8_e4m3fn), "q: H = 16 index heads"),
    ("ks", lambda a: torch.full((4,), -1, dtype=torch.int32), "ks: min -1 < 0"),
    ("ke", lambda a: torch.full((4,), 257, dtype=torch.int32), "ke: max 257 > N = 256"),
    ("ke", lambda a: torch.tensor([5, 5, 0, 5], dtype=torch.int32), "ke: row 2: ke 0 < ks 0|row 2"),
])
def test_each_rule_names_the_tensor(name, bad, rule):
    args = inputs()
    value = bad(args)
    kwargs = {name: value}
    if name == "q" and value.dim() == 3 and value.shape[1] != 64:
        kwargs["weights"] = torch.randn(value.shape[0], value.shape[1])
    if name == "ke" and rule.startswith("ke: row 2"):
        kwargs["ks"] = torch.tensor([0, 0, 3, 0], dtype=torch.int32)
        rule = "ke: row 2: ke 0 < ks 3"
    with pytest.raises(InputCheckError, match=rule):
        check(**kwargs)


def test_head_dim_and_sm100_rules():
    q = torch.empty(4, 64, 32).to(torch.float8_e4m3fn)
    k = torch.empty(256, 32).to(torch.float8_e4m3fn)
    with pytest.raises(InputCheckError, match="q: D = 32 head dim: SM90 supports"):
        check(q=q, k=k)
    check(q=q, k=k, arch_major=10)
    q16 = torch.empty(4, 16, 128).to(torch.float8_e4m3fn)
    check(q=q16, weights=torch.randn(4, 16), arch_major=10)
    with pytest.raises(InputCheckError, match="no fp8 MQA-logits kernel for SM80"):
        check(arch_major=8)


def test_empty_problems():
    with pytest.raises(InputCheckError, match="M \\(query rows\\) must be > 0"):
        a = inputs(m=0)
        check(q=a["q"], weights=a["weights"], ks=a["ks"], ke=a["ke"])
    with pytest.raises(InputCheckError, match="N \\(KV tokens\\) must be > 0"):
        check(k=torch.empty(0, 128).to(torch.float8_e4m3fn), k_scale=torch.empty(0),
              ke=torch.zeros(4, dtype=torch.int32), check_values=False)


def test_compressed_width_must_hold_every_window():
    ks = torch.tensor([0, 10, 20, 30], dtype=torch.int32)
    ke = torch.tensor([5, 40, 21, 31], dtype=torch.int32)
    check(ks=ks, ke=ke, max_seqlen_k=30)
    with pytest.raises(InputCheckError, match="max_seqlen_k: 29 is narrower than the longest window"):
        check(ks=ks, ke=ke, max_seqlen_k=29)
    # values unchecked on request (no device sync)
    check(ks=ks, ke=ke, max_seqlen_k=29, check_values=False)


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_agrees_with_the_reference_backend(seed, compressed):
    """Same contract as ReferenceBackend.topk, bit for bit, on tie-heavy logits."""
    import numpy as np

    from indexer_lib.run.kernels.reference import ReferenceBackend

    g = torch.Generator().manual_seed(seed)
    # two requests back to back, causal windows, values from a few levels (ties everywhere)
    seq, qlen = [70, 50], [30, 50]
    ks, ke = causal_windows(seq, qlen)
    cu = sum(seq)
    ks_t, ke_t = torch.tensor(ks, dtype=torch.int32), torch.tensor(ke, dtype=torch.int32)
    m = len(ks)
    width = max(e - b for b, e in zip(ks, ke)) if compressed else cu
    x = torch.randint(-3, 4, (m, width), generator=g).to(torch.float32) * 0.5
    host = (np.array(ks, dtype=np.int32), np.array(ke, dtype=np.int32))
    ref = ReferenceBackend().topk(x.clone(), ks_t, ke_t, 16, compressed=compressed, host_windows=host)
    mine = window_topk(x.clone(), ks_t, ke_t, 16, compressed=compressed, block_bytes=4096)
    mine_host = window_topk(x.clone(), ks_t, ke_t, 16, compressed=compressed, host_windows=host)
    assert torch.equal(mine, ref)
    assert torch.equal(mine_host, ref)


def _live_bytes():
    """Peak bytes of CPU storages created inside the block (the tracer's tracker on cpu)."""
    from indexer_lib.run.tracer import AllocationTracker

    return AllocationTracker("cpu")


@pytest.mark.parametrize("rows,width,k,block", [(64, 3000, 256, 2**20), (300, 500, 2048, 2**18),
                                                (40, 20000, 2048, 2**22), (7, 100, 2048, 2**30)])
@pytest.mark.parametrize("ties", [False, True])
def test_temporaries_bound_holds_for_what_is_really_allocated(rows, width, k, block, ties):
    g = torch.Generator().manual_seed(rows)
    if ties:
        x = torch.randint(0, 3, (rows, width), generator=g).to(torch.float32)
    else:
        x = torch.randn(rows, width, generator=g)
    ks = torch.randint(0, width // 4, (rows,), generator=g).to(torch.int32)
    ke = torch.full((rows,), width, dtype=torch.int32)
    out = torch.full((rows, k), -1, dtype=torch.int32)
    with _live_bytes() as live:
        window_topk(x, ks, ke, k, block_bytes=block, out=out)
    bound = topk_temporaries_bytes(rows, width, k, block_bytes=block, ties=ties)
    assert live.peak <= bound, (live.peak, bound)
    if not ties:  # and the bound is not loose by more than a factor of two
        assert live.peak >= bound / 2, (live.peak, bound)
