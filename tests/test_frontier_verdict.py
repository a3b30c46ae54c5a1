"""A frontier's verdict reads the ledger's step lines: the worst prefill step's transient peak and
the worst decode step's paged logits (``memory.decode``), the first past the free memory failing."""
import numpy as np

from indexer_lib.cli.common import verdict_line
from indexer_lib.ledger import Ledger, LedgerLine
from indexer_lib.ledger.deployment import Server, deployment_ledger
from indexer_lib.memory import NO_LINE, first_past_free
from indexer_lib.presets import GIB
from indexer_lib.search import Schedule
from indexer_lib.sweep import Grid, at_free_memory, model_rows, to_frame
from indexer_lib.sweep.rows import step_verdict
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, scheduled_steps

# GLM-5.3-Flash on vLLM 0.33.0 with three drafts: its decode logits are as wide as max_model_len // 4
GRID = dict(model="glm-5.3-flash", engine=("vllm==0.33.0",), isl=(2048,), concurrency=(64,), speculative_tokens=3,
            strategy=("vllm",), budget_mb=(64.0,))


def test_the_first_line_past_the_free_memory_fails():
    oom, line = step_verdict(np.array([10, 30, 10, 10]), np.array([5, 5, 30, 0]), 20)
    assert oom.tolist() == [False, True, True, False]
    assert line.tolist() == ["", "prefill", "decode", ""]
    oom, line = step_verdict(30, 40, 20)  # both past it: the prefill line, as the ledger lists it first
    assert bool(oom) and str(line) == "prefill"


def test_one_rule_names_the_first_line_past_the_free_memory():
    """memory.verdict: in the lines' order, the first above the free memory; exactly what is free fits."""
    assert first_past_free([10, 30, 40], 20) == 1 and first_past_free([10, 20], 20) == NO_LINE
    assert first_past_free([], 20) == NO_LINE
    first = first_past_free([np.array([10, 30, 10]), 25, np.array([0, 0, 26])], 25)  # numbers broadcast over rows
    assert first.tolist() == [NO_LINE, 0, 2]


def test_the_ledger_and_the_rows_read_the_same_rule():
    """Ledger.oom_line (boot lines aside: they take KV cache) and a sweep row name the same line."""
    rng = np.random.default_rng(0)
    transient, decode = rng.integers(0, 40, 200), rng.integers(0, 40, 200)
    oom, line = step_verdict(transient, decode, 20)
    for t, d, o, name in zip(transient, decode, oom, line):
        ledger = Ledger((LedgerLine("boot", "K workspace", 99, "s"), LedgerLine("prefill", "prefill", int(t), "s"),
                         LedgerLine("decode", "decode", int(d), "s")), 20, "given")
        assert (ledger.verdict == "oom") == o and (ledger.oom_line.name if o else "") == name
    # the allocator line, last, fails only where both step lines fit
    ledger = Ledger((LedgerLine("prefill", "p", 10, "s"), LedgerLine("allocator", "a", 30, "s")), 20, "given")
    assert ledger.oom_line.name == "a" and Ledger(ledger.lines, 30, "given").oom_line is None


def test_one_step_and_a_run_phrase_the_same_verdict():
    """cli.common.verdict_line: a step says what it allocates, a run (deploy) names its failing line."""
    lines = (LedgerLine("prefill", "prefill step's transient peak", 2 * GIB, "s", "step 3"),
             LedgerLine("decode", "decode", 3 * GIB, "s", "64 decode tokens"))
    oom, fits = Ledger(lines, int(2.5 * GIB), "given"), Ledger(lines, 3 * GIB, "given")
    assert verdict_line(Ledger(lines)) is None and verdict_line(Ledger(lines), over_run=True) is None
    assert verdict_line(oom) == ("OOM: the step allocates 3.00 GiB beyond the buffers it already holds (decode), "
                                 "against 2.50 GiB free when it runs (given)")
    assert verdict_line(fits).startswith("fits: the step allocates 3.00 GiB")
    assert verdict_line(oom, over_run=True) == ("OOM: decode needs 3.00 GiB (64 decode tokens), against 2.50 GiB "
                                                "free when a step runs (given)")
    assert verdict_line(fits, over_run=True) == ("fits: every line fits 3.00 GiB free when a step runs (given); "
                                                 "the most any asks for is 3.00 GiB")


def test_the_schedule_keeps_the_most_requests_one_step_decodes():
    workload, config = ClosedLoopWorkload(8, 4096, 64), SchedulerConfig(max_num_batched_tokens=4096)
    schedule = Schedule.of(workload, config)
    steps = list(scheduled_steps(workload, config))
    assert schedule.most_decoding == max(s.num_decode for s in steps) > 0
    assert len(schedule.batches) == sum(s.batch is not None for s in steps)


def test_a_decode_step_can_be_the_line_that_fails():
    (row,) = to_frame(list(model_rows(Grid.of(free_gib=(0.2,), **GRID)))).to_dict("records")
    assert row["decode_bytes"] > 0.2 * GIB > row["peak_transient_bytes"]
    assert row["oom"] and row["oom_line"] == "decode" and row["needed_bytes"] == row["decode_bytes"]
    # the same rows at more free memory: both lines fit; at less, the prefill line fails first
    frame = to_frame(list(model_rows(Grid.of(free_gib=(0.2,), **GRID))))
    assert at_free_memory(frame, 1.0)[["oom", "oom_line"]].values.tolist() == [[False, ""]]
    assert at_free_memory(frame, 0.1)[["oom", "oom_line"]].values.tolist() == [[True, "prefill"]]


def test_the_frontiers_decode_line_is_the_ledgers():
    """The frontier's worst decode step is the one the deployment's ledger finds over the same run."""
    (row,) = model_rows(Grid.of(free_gib=(2.0,), **GRID))
    workload = ClosedLoopWorkload(64, 2048, row["osl"])
    d = deployment_ledger(Server("glm-5.3-flash", "vllm==0.33.0", speculative_tokens=3, budget_mb=64), workload,
                          strategy="vllm", free_gib=2.0)
    (decode,) = d.run.ledger.of("decode")
    assert decode.bytes == row["decode_bytes"]
    assert f"{row['worst_decode_tokens']:,} decode tokens" in decode.detail


def test_auto_counts_the_same_decode_line():
    """auto's candidates need the worst decode step's logits too: one definition with the frontier's."""
    from indexer_lib.plan import PlanSettings
    from indexer_lib.study.auto import recommend

    (row,) = model_rows(Grid.of(free_gib=(2.0,), **GRID))
    settings = PlanSettings("glm-5.3-flash", "vllm==0.33.0", temporaries="deepgemm")
    config = SchedulerConfig(max_num_batched_tokens=row["max_num_batched_tokens"], max_num_seqs=row["max_num_seqs"],
                             speculative_tokens=3)
    rec = recommend([ClosedLoopWorkload(64, 2048, row["osl"])], 2.0, settings, config, budgets_mb=(64.0,))
    assert {c.decode_bytes for c in rec.candidates} == {row["decode_bytes"]}
    assert all(c.needs_bytes >= c.decode_bytes for c in rec.candidates)
