"""TensorRT-LLM as a third engine: its profiles' facts and sources, its own chunker held to a
restatement of the rule read in its code (the wheel is CUDA-only and is not installed here), the
reported ~16 GB allocation, and its names and refusals on the command line."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import example, given, settings as hsettings, strategies as st

from indexer_lib.cli.main import main
from indexer_lib.engines import EngineBudget, engine_names, get_engine, process_budget
from indexer_lib.plan import PlanSettings
from indexer_lib.memory import make_plan
from indexer_lib.refdata import data_path
from indexer_lib.workload import PrefillRequest, StepBatch

RELEASES = ["trtllm==1.3.0rc15.post1", "trtllm==1.3.0rc27", "trtllm==1.4.0rc1", "trtllm==1.4.0rc4"]
BEFORE, LATEST = "trtllm==1.3.0rc15.post1", "trtllm==1.4.0rc4"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- the profiles

def test_the_releases_and_their_rules():
    assert engine_names("trtllm") == RELEASES
    assert get_engine("trtllm").name == LATEST
    before, latest = get_engine(BEFORE), get_engine(LATEST)
    for p in (before, latest):
        assert p.chunker == "tokens" and p.chunk_rows == 32768 and p.layout == "full"
        assert p.compressed_kv and p.logits_alive == 2 and p.workspace_lifetime == "chunk"
    assert before.budget_rule == "none" and before.chunk_rows_by_kv is None
    assert latest.budget_rule == "fixed-elements" and latest.budget_default == 2**31
    assert latest.budget_env == "TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET"
    assert latest.chunk_rows_by_kv == ((512 * 1024, 8192), (256 * 1024 - 1, 16384))
    # the adaptive rule: above 256K - 1 compressed entries 16K rows, above 512K 8K; only lowers
    assert [latest.chunk_rows_for(k) for k in (0, 262143, 262144, 524288, 524289)] == [32768, 32768, 16384, 16384, 8192]
    assert replace(latest, chunk_rows=4096).chunk_rows_for(10**6) == 4096
    # the element cap is fp32 bytes to the planners; its deploy line is a whole number of elements
    assert process_budget(latest) == 4 * 2**31 and latest.default_budget_mb == 8192
    assert latest.deploy_line(2**30) == "TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET=1073741824"
    with pytest.raises(ValueError, match="whole number of elements"):
        EngineBudget(latest, 0.5)


def test_every_fact_names_its_source_and_says_what_was_not_read():
    for path in sorted(data_path("engines").glob("trtllm-*.json")):
        era = json.loads(path.read_text())
        assert "cannot be installed here" in era["note"], path.name
        for name, fact in era["facts"].items():
            source = fact["source"]
            assert source and ("NVIDIA/TensorRT-LLM" in source or "TensorRT-LLM" in source or "DeepGEMM" in source
                               or "not read" in source or "assumed" in source), (path.name, name)
        facts = era["facts"]
        # what was inferred or not read says so
        assert "inferred" in facts["deepgemm_rules"]["source"]
        assert "not read" in facts["dummy_logits_reservation"]["source"]
        assert "assumed" in facts["scheduler_max_num_seqs"]["source"]


# ----------------------------------------------------------------------------- the chunker

def restated(requests, ratio, chunk_rows, by_kv, elements):
    """TensorRT-LLM's prefill indexer calls, restated from its code: (first row, end row, K) per
    logits call.  The chunk's rows: the configured rows, lowered by the step's longest compressed
    K; requests packed by new tokens, a longer one cut into blocks; a packed chunk scores all its
    requests' K, a block its request's K up to the block's end; the rows tiled to the element cap
    except in the single pass (one chunk, nothing cached)."""
    ctx = [c for c, _ in requests]
    q = [n for _, n in requests]
    longest = max((c + n) // ratio for c, n in requests)
    size = chunk_rows
    for above, rows in by_kv or ():
        if longest > above:
            size = min(chunk_rows, rows)
            break
    groups, i = [], 0
    while i < len(q):
        if q[i] > size:
            groups += [[(i, s, min(s + size, q[i]))] for s in range(0, q[i], size)]
            i += 1
            continue
        group, used = [(i, 0, q[i])], q[i]
        i += 1
        while i < len(q) and q[i] <= size and used + q[i] <= size:
            group.append((i, 0, q[i]))
            used += q[i]
            i += 1
        groups.append(group)
    single = len(groups) == 1 and not any(ctx)
    start = [sum(q[:k]) for k in range(len(q))]
    calls = []
    for group in groups:
        if len(group) == 1:
            k, s, e = group[0]
            first, rows, kv = start[k] + s, e - s, (ctx[k] + e) // ratio
        else:
            first, rows = start[group[0][0]], sum(e - s for _, s, e in group)
            kv = sum((ctx[k] + e) // ratio for k, _, e in group)
        if kv == 0:
            continue
        tile = rows if elements is None or single else max(1, min(rows, elements // max(1, kv)))
        calls += [(first + t, first + min(t + tile, rows), kv) for t in range(0, rows, tile)]
    return calls, size, single


def plan_calls(requests, model, profile, elements):
    settings = PlanSettings(model, profile, temporaries="deepgemm")
    batch = StepBatch(tuple(PrefillRequest(c, n) for c, n in requests))
    plan = make_plan(batch, "engine", None if elements is None else 4 * elements, settings)
    return [(c.token_start, c.token_end, c.logits_cols) for c in plan.chunks], plan


small_steps = st.lists(st.tuples(st.integers(0, 300), st.integers(1, 300)), min_size=1, max_size=6)


@hsettings(max_examples=300, deadline=None)
# requests whose rows fill a chunk exactly: they are packed together, not one a chunk
@example(requests=[(0, 50), (0, 50)], model="deepseek-v3.2", chunk_rows=100, elements=None, adaptive=False)
@given(requests=small_steps, model=st.sampled_from(["deepseek-v3.2", "deepseek-v4-flash"]),
       chunk_rows=st.integers(1, 200), elements=st.one_of(st.none(), st.integers(1, 20000)),
       adaptive=st.booleans())
def test_the_chunker_is_the_restated_rule(requests, model, chunk_rows, elements, adaptive):
    """Small chunk rows, thresholds and caps so that random steps reach every branch."""
    by_kv = ((400, max(1, chunk_rows // 4)), (150, max(1, chunk_rows // 2))) if adaptive else None
    profile = replace(get_engine(LATEST if elements is not None else BEFORE), chunk_rows=chunk_rows,
                      chunk_rows_by_kv=by_kv)
    ratio = 4 if model == "deepseek-v4-flash" else 1
    got, plan = plan_calls(requests, model, profile, elements)
    want, size, single = restated(requests, ratio, chunk_rows, by_kv, elements)
    assert got == want
    # every row of a chunk with K is scored once; no call is taller than the chunk's rows; a tiled
    # call stays within the element cap unless one row alone breaks it, and is flagged then
    rows = [r for a, b, _ in got for r in range(a, b)]
    assert len(rows) == len(set(rows))
    tiled = elements is not None and not single
    for (a, b, kv), c in zip(got, plan.chunks):
        assert b - a <= size
        if tiled:
            assert (b - a) * kv <= elements or b - a == 1
        assert c.over_budget == (tiled and kv > elements)


@pytest.mark.parametrize("seed", range(3))
def test_the_chunker_on_long_random_steps(seed):
    """At the releases' own sizes: 32K rows, the 2^31 cap, contexts to 1M tokens."""
    import random

    rng = random.Random(seed)
    for _ in range(40):
        requests = [(rng.choice([0, rng.randrange(0, 600_000)]), rng.randrange(1, 80_000))
                    for _ in range(rng.randrange(1, 5))]
        for name in (BEFORE, LATEST):
            p = get_engine(name)
            elements = None if p.budget_rule == "none" else int(p.budget_default)
            got, _ = plan_calls(requests, "deepseek-v4-flash", p, elements)
            want, size, _ = restated(requests, 4, p.chunk_rows, p.chunk_rows_by_kv, elements)
            assert got == want and all(b - a <= size for a, b, _ in got)


# ----------------------------------------------------------------------------- the reported case

def test_the_reported_16gb_from_its_release_and_the_later_rules(capsys):
    """A ~500K-token DeepSeek-V4 prompt in one step at the 32K chunk, before the adaptive chunk
    and the element cap: the largest call is the last full block, 32,768 rows x 122,880 entries."""
    args = ("plan", "--model", "deepseek-v4-flash", "--query-lens", "500000", "--seq-lens", "500000",
            "--strategy", "engine", "--json")
    code, out, err = run(capsys, *args, "--engine", BEFORE)
    assert code == 0, err
    before = json.loads(out)
    largest = max(before["chunks"], key=lambda c: c["logits_bytes"])
    assert (largest["rows"][1] - largest["rows"][0], largest["logits_cols"]) == (32768, 122880)
    assert 32768 * 122880 * 4 == 16_106_127_360  # the report's "~16GB"
    # DeepGEMM 2.6 pads the row to align(N + 256, 256) fp32 elements
    assert before["largest_logits_bytes"] == 32768 * 123136 * 4
    assert before["num_chunks"] == 16  # ceil(500,000 / 32,768) blocks, one call each
    # the latest release: the same 32K blocks (125,000 entries < 256K), each call capped at 2^31
    code, out, _ = run(capsys, *args, "--engine", "trtllm")
    latest = json.loads(out)
    assert all((c["rows"][1] - c["rows"][0]) * c["logits_cols"] <= 2**31 for c in latest["chunks"])
    assert latest["largest_logits_bytes"] < before["largest_logits_bytes"] / 1.8
    assert max(c["rows"][1] for c in latest["chunks"] if c["rows"][0] < 32768) == 32768


def test_the_adaptive_chunk_at_a_million_tokens(capsys):
    """DeepSeek-V4 at 1,048,576 tokens: 262,144 compressed entries, above 256K - 1, so 16K-row
    chunks from the release with the adaptive rule; 32K rows before it."""
    args = ("plan", "--model", "deepseek-v4-flash", "--query-lens", "1048576", "--seq-lens", "1048576",
            "--strategy", "engine", "--json")
    blocks = {}
    for name in (BEFORE, LATEST):
        code, out, err = run(capsys, *args, "--engine", name)
        assert code == 0, err
        chunks = json.loads(out)["chunks"]
        # a chunk is a run of calls sharing one gathered K
        blocks[name] = max(sum(c["rows"][1] - c["rows"][0] for c in chunks if c["kv_tokens"] == kv)
                           for kv in {c["kv_tokens"] for c in chunks})
    assert blocks == {BEFORE: 32768, LATEST: 16384}


def test_the_reported_case_is_a_row_of_the_field_data():
    from indexer_lib.study.reported import published_cases, reproductions, through_releases

    case = {c["case"]: c for c in published_cases()}["trtllm-dsv4-500k-chunk32k"]
    assert case["engine"] == BEFORE and case["source"] == "https://github.com/NVIDIA/TensorRT-LLM/pull/15459"
    row = reproductions().set_index("case").loc["trtllm-dsv4-500k-chunk32k"]
    assert (row["rows"], row["kv_tokens"]) == (32768, 122880) and row["matches"]
    table = through_releases().set_index(["case", "engine"]).loc["trtllm-dsv4-500k-chunk32k"]
    assert set(table.index) == {BEFORE, LATEST}
    assert table.loc[BEFORE, "reproduces_published"]
    assert table.loc[LATEST, "largest_logits_rows"] * table.loc[LATEST, "largest_logits_cols"] <= 2**31


# ----------------------------------------------------------------------------- names and refusals

@pytest.mark.parametrize("given_name, name", [
    ("trtllm", LATEST), ("TensorRT-LLM==1.3.0rc27", "trtllm==1.3.0rc27"), ("trtllm==v1.3.0rc27", "trtllm==1.3.0rc27"),
    ("tensorrt_llm==1.4.0rc1", "trtllm==1.4.0rc1"), ("trtllm==1.4.0rc4.dev12", LATEST),
])
def test_names_as_people_write_them(given_name, name):
    assert get_engine(given_name).name == name


@pytest.mark.parametrize("argv, message", [
    (["--engine", "trtllm==1.3.0rc28"], "did you mean trtllm==1.3.0rc27"),
    (["--engine", "trtllm==1.2.0"], "did you mean trtllm==1.3.0rc15.post1"),
    (["--engine", "trtllm", "--gpu", "gb10"], "runs DeepGEMM only on CUDA families 9.x, 10.x"),
    (["--engine", BEFORE, "--budget-mb", "100"], "has no logits budget"),
    (["--engine", "trtllm==1.4.0rc1", "--model", "glm-5.3-flash"], "glm-5.3-flash"),
])
def test_refusals_are_one_line(argv, message, capsys):
    code, _, err = run(capsys, "plan", "--model", "deepseek-v4-flash", "--query-lens", "8", "--seq-lens", "8",
                       "--strategy", "engine", *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_auto_tunes_the_element_cap(capsys):
    code, out, err = run(capsys, "auto", "--model", "deepseek-v4-flash", "--engine", "trtllm", "--free-gib", "20",
                         "--workload", "1x262144x4", "--budgets-mb", "1024,4096")
    assert code == 0, err
    assert out.splitlines()[0] == "deepseek-v4-flash on trtllm==1.4.0rc4 (h200), 20 GiB free, 1 workload (modelled):"
    assert out.splitlines()[1] in ("TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET=268435456",
                                   "TLLM_INDEXER_MQA_LOGITS_ELEM_BUDGET=1073741824")
