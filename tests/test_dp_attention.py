"""SGLang's DP attention: one rank of ``--dp N`` is planned, its sizes divided as the release's own
code divides them (lifted with ``ast`` from the installed sources: those modules import GPU
kernels), its clients dealt as the release's round-robin dispatcher deals them; a bad --dp is
refused in one line, exit 2."""
from __future__ import annotations

import ast
import logging
import types
from pathlib import Path

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli import main
from indexer_lib.engines import check_dp, get_engine, release_scheduler
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import model_rows
from indexer_lib.workload import ClosedLoopWorkload, SchedulerConfig, scheduled_steps
from indexer_lib.workload.ranks import rank_clients, rank_workload

from test_engines import sglang_src

SERVER_ARGS = "sglang/srt/server_args.py"
PARALLEL_HOOK = "sglang/srt/arg_groups/parallel_hook.py"
# where each installed release divides chunked_prefill_size by the DP attention ranks
DIVIDES = {"0.5.12": (SERVER_ARGS, "_handle_data_parallelism"), "0.5.14": (SERVER_ARGS, "_handle_data_parallelism"),
           "0.5.15": (SERVER_ARGS, "_handle_data_parallelism"), "0.5.17": (SERVER_ARGS, "_handle_data_parallelism"),
           "0.5.20": (PARALLEL_HOOK, "handle_data_parallelism"), "0.5.21": (PARALLEL_HOOK, "handle_data_parallelism"),
           "0.5.22": (PARALLEL_HOOK, "handle_data_parallelism"), "0.5.23": (PARALLEL_HOOK, "handle_data_parallelism")}
DISPATCH = "sglang/srt/managers/data_parallel_controller.py"


def function_node(release: str, path: str, name: str) -> ast.FunctionDef:
    """A function or method of the release's source, by name (one of that name in the file)."""
    tree = ast.parse((Path(sglang_src(release, needs=path)) / path).read_text())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, (release, path, name)
    return found[0]


def lifted(release: str, path: str, name: str, namespace: dict):
    """The release's own function, its annotations and decorators dropped (they name GPU types)."""
    node = function_node(release, path, name)
    node.decorator_list, node.returns = [], None
    for arg in node.args.args + node.args.kwonlyargs:
        arg.annotation = None
    exec(compile(ast.fix_missing_locations(ast.Module([node], [])), path, "exec"), namespace)
    return namespace[name]


def division_expressions(release: str) -> tuple[ast.expr, ast.expr]:
    """(the new chunked_prefill_size, the assert that DP divides TP) as the release's handler writes them."""
    fn = function_node(release, *DIVIDES[release])
    values = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Attribute) and t.attr == "chunked_prefill_size" for t in n.targets)]
    values += [k.value for n in ast.walk(fn) if isinstance(n, ast.Call) for k in n.keywords
               if k.arg == "chunked_prefill_size"]
    asserts = [n.test for n in ast.walk(fn) if isinstance(n, ast.Assert)
               and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(n.test))]
    assert len(values) == 1 and len(asserts) == 1, release
    return values[0], asserts[0]


def evaluate(expr: ast.expr, args) -> object:
    return eval(compile(ast.Expression(expr), "<sglang>", "eval"), {}, {"self": args, "cfg": args})


def server_args(release: str, tp: int, dp: int, chunked: int):
    """SGLang's server arguments after ``--tp tp --dp-size dp --enable-dp-attention``: from 0.5.22 the
    release's own handler resolves that spelling to --attn-dp-size (parallel_hook.py:39-61)."""
    args = types.SimpleNamespace(tp_size=tp, dp_size=dp, attn_dp_size=1, enable_dp_attention=True,
                                 chunked_prefill_size=chunked)
    if release in ("0.5.22", "0.5.23"):
        def declare(target, _handler, **values):
            for k, v in values.items():
                setattr(target, k, v)
        lifted(release, PARALLEL_HOOK, "handle_deprecated_dp_attention",
               {"resolving_view": lambda a: a, "declare_resolution": declare})(args)
        assert (args.attn_dp_size, args.dp_size, args.enable_dp_attention) == (dp, 1, False)
    return args


@pytest.mark.parametrize("release", sorted(DIVIDES))
def test_each_rank_gets_the_chunked_prefill_sglangs_own_code_divides(release):
    engine = get_engine(f"sglang=={release}")
    division, divides = division_expressions(release)
    compared = 0
    for gpu in ("h200", "b200"):
        for given in (None, 4096, 12288, 16384):
            for tp, dp in ((8, 2), (8, 4), (8, 8), (16, 8), (4, 4)):
                server = release_scheduler(engine, 64, gpu, max_num_batched_tokens=given).max_num_batched_tokens
                args = server_args(release, tp, dp, server)
                assert evaluate(divides, args)  # SGLang takes this layout
                theirs = evaluate(division, args)
                ours = release_scheduler(engine, 64, gpu, dp=dp, max_num_batched_tokens=given)
                assert ours.max_num_batched_tokens == theirs and ours.dp == dp, (release, gpu, given, tp, dp)
                compared += 1
    assert compared == 40
    # a layout SGLang asserts against is refused in one line, naming the rule
    assert not evaluate(divides, server_args(release, 8, 3, 8192))
    with pytest.raises(BadValue, match=r"dp 3 with tp 8: SGLang asserts tp_size % dp_size == 0") as e:
        check_dp(engine, 8, 3)
    assert e.value.name == "dp" and "\n" not in str(e.value)


def fake_controller(dp: int):
    sent = []

    class Worker:
        def __init__(self, rank):
            self.rank = rank

        def send_pyobj(self, req):
            sent.append(self.rank)
    workers = [Worker(r) for r in range(dp)]
    controller = types.SimpleNamespace(round_robin_counter=0, status=[True] * dp, workers=workers,
                                       _active_workers=list(range(dp)),
                                       maybe_external_dp_rank_routing=lambda req: False)
    return controller, sent


@pytest.mark.parametrize("release", ["0.5.12", "0.5.23"])
def test_the_clients_are_dealt_as_sglangs_default_round_robin_dispatcher_deals_them(release):
    # the default load balance method, outside PD disaggregation, is round robin
    args = types.SimpleNamespace(load_balance_method="auto", disaggregation_mode="null")
    if release == "0.5.12":
        lifted(release, SERVER_ARGS, "_handle_load_balance_method", {})(args)
    else:
        def declare(target, _handler, **values):
            for k, v in values.items():
                setattr(target, k, v)
        lifted(release, "sglang/srt/arg_groups/serving_hook.py", "handle_load_balance_method",
               {"resolving_view": lambda a: a, "declare_resolution": declare})(args)
    assert args.load_balance_method == "round_robin"
    for dp in (2, 4, 8):
        for clients in (1, 7, 8, 9, 64, 65, 100):
            controller, sent = fake_controller(dp)
            deal = lifted(release, DISPATCH, "round_robin_scheduler",
                          {"logger": logging.getLogger("sglang"),
                           "sock_send": lambda worker, req: worker.send_pyobj(req)})
            for request in range(clients):  # the closed loop's first wave
                deal(controller, request)
            held = [sent.count(rank) for rank in range(dp)]
            assert max(held) == rank_clients(clients, dp) and min(held) == clients // dp, (release, dp, clients)


MAX_REQS = {"0.5.12": ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py", "_resolve_max_num_reqs"),
            "0.5.23": ("sglang/srt/mem_cache/kv_cache_configurator.py", "resolve_max_num_reqs")}


@pytest.mark.parametrize("release", sorted(MAX_REQS))
def test_a_given_max_running_requests_is_divided_per_rank_and_the_default_is_not(release):
    path, name = MAX_REQS[release]
    engine = get_engine(f"sglang=={release}")
    for given in (None, 64, 512, 1000, 4096):
        schedule = types.SimpleNamespace(max_running_requests=given)
        resolve = lifted(release, path, name, {"get_schedule": lambda: schedule, "logger": logging.getLogger("x")})
        answers = {}
        for dp in (1, 8):
            runner = types.SimpleNamespace(model_config=types.SimpleNamespace(context_len=202_752), dp_size=dp,
                                           attn_dp_size=dp, mambaish_config=None,
                                           server_args=types.SimpleNamespace(max_running_requests=given))
            answers[dp] = resolve(runner, 10**8)  # a KV pool that caps nothing
            ours = release_scheduler(engine, 64, dp=dp, max_num_seqs=given).max_num_seqs
            if given is not None:
                assert ours == answers[dp] == given // dp, (release, given, dp)
        if given is None:  # the default is sized per rank already: DP does not change it
            assert answers[1] == answers[8]
            assert release_scheduler(engine, 64, dp=8).max_num_seqs == release_scheduler(engine, 64).max_num_seqs


def test_a_rank_is_the_busiest_ranks_share_of_the_clients_and_prompts():
    w = ClosedLoopWorkload(65, 2048, 8, mix="0.01x65536")
    share = rank_workload(w, 8)
    assert (share.concurrency, share.total_prompts) == (9, 18) and share.mix == w.mix
    assert rank_workload(ClosedLoopWorkload(64, 2048, 8, num_prompts=100), 8).num_prompts == 13
    assert rank_workload(w, 1) is w
    # the simulator runs the share of a scheduler that is one rank of several
    one_rank = list(scheduled_steps(w, SchedulerConfig(max_num_batched_tokens=1024, dp=8)))
    alone = list(scheduled_steps(share, SchedulerConfig(max_num_batched_tokens=1024)))
    assert [s.batch for s in one_rank] == [s.batch for s in alone]


def frontier_row(dp: int, concurrency: int = 64, **settings) -> dict:
    grid = Grid.of(engine=("sglang==0.5.23",), concurrency=(concurrency,), isl=(10240,), osl=64, tp=8, dp=dp,
                   strategy=("engine",), **settings)
    (row,) = list(model_rows(grid))
    return row


def test_a_frontier_row_at_dp_8_is_one_rank_of_the_server_at_dp_1():
    one, eight = frontier_row(1), frontier_row(8)
    assert (one["dp"], one["rank_concurrency"], one["max_num_batched_tokens"]) == (1, 64, 8192)
    assert (eight["dp"], eight["rank_concurrency"], eight["max_num_batched_tokens"]) == (8, 8, 1024)
    assert eight["concurrency"] == one["concurrency"] == 64 and eight["max_num_seqs"] == one["max_num_seqs"]
    assert one["worst_rows"] > 1024 >= eight["worst_rows"]
    assert eight["model_peak_transient_bytes"] < one["model_peak_transient_bytes"]
    assert one["not_default"] == "" and eight["not_default"].startswith("dp=8 (default 1): SGLang's DP attention")
    assert one["task"] != eight["task"] and eight["task"].endswith("|dp8")
    # the rank is the server of its 8 clients at its chunked prefill: the same worst step
    alone = frontier_row(1, concurrency=8, max_num_batched_tokens=(1024,))
    for column in ("worst_rows", "worst_kv_tokens", "model_peak_transient_bytes", "total_chunks"):
        assert eight[column] == alone[column], column


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("given, message", [
    (("--engine", "vllm", "--tp", "8", "--dp", "8"),
     "dp 8: DP attention is SGLang's (--dp-size N --enable-dp-attention): vllm==0.33.0 has none that is modelled"),
    (("--engine", "sglang", "--tp", "8", "--dp", "3"), "dp 3 with tp 8: SGLang asserts tp_size % dp_size == 0"),
    (("--engine", "sglang", "--dp", "0"), "dp 0: must be a whole number >= 1"),
    (("--engine", "sglang", "--tp", "8", "--dp", "8", "--kv-cache-tokens", "auto"),
     "dp 8 with kv_cache_tokens auto: the derived cache splits the weights over tp ranks"),
    (("--engine", "sglang", "--tp", "8", "--dp", "8", "--max-num-seqs", "4"),
     "max_num_seqs 4 with dp 8: SGLang gives each rank 4 // 8 = 0"),
])
@pytest.mark.parametrize("command", ["frontier", "auto", "deploy"])
def test_a_bad_dp_is_refused_in_one_line_by_every_command_that_takes_it(capsys, tmp_path, command, given, message):
    extra = {"frontier": ("--concurrency", "8", "--isl", "2048", "--osl", "4", "--out", str(tmp_path / "t.csv")),
             "auto": ("--workload", "8x2048x4", "--free-gib", "8"), "deploy": ("--workload", "8x2048x4")}[command]
    code, out, err = run(capsys, command, *given, *extra)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "t.csv").exists()


def test_dp_is_named_wherever_deploy_and_auto_show_a_number(capsys):
    code, out, _ = run(capsys, "deploy", "--engine", "sglang==0.5.23", "--tp", "8", "--dp", "8",
                       "--workload", "64x10240x64")
    assert code in (0, 1) and "DP attention 8 ranks (one planned)" in out and "dp=8 (default 1)" in out
    code, out, _ = run(capsys, "auto", "--engine", "sglang==0.5.23", "--tp", "8", "--dp", "8",
                       "--workload", "64x10240x64", "--free-gib", "8")
    assert code in (0, 1) and "scheduler: not the release default: dp=8 (default 1)" in out
