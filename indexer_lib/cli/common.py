"""What the subcommands share: the usage error, how list and number options are read, and one
step's batch options (a grid's options come from its settings: ``cli.options``)."""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import threading

from ..engines import DEFAULT_ENGINE, SGLANG_MEM_FRACTION_STATIC, get_engine, process_budget
from ..engines.scheduler import release_scheduler
from ..ledger import Ledger, given_free, plan_ledger
from ..ledger.free import server_free
from ..engines.budget import sglang_static_budget
from ..padding import DEEPGEMM_RULES, unpadded_logits_bytes
from ..plan import NO_BUDGET, STRATEGIES, PlanSettings, Strategy, get_strategy
from ..memory import make_plan
from ..presets import DEFAULT_MODEL, GPUS, MIB, MODELS, budget_bytes_from_mb, check_within_gpu, free_bytes_from_gib
from ..presets import format_bytes, get_gpu, get_model
from ..workload import MAX_CONCURRENCY, StepBatch
from . import exits


class UsageError(ValueError):
    """Bad command-line input: reported as one line, exit status 2."""


@contextlib.contextmanager
def working(what: str):
    """A line on stderr saying what runs and for how long, while one long call runs (quiet when
    stderr is not a terminal)."""
    from tqdm import tqdm

    bar = tqdm(total=None, desc=what, file=sys.stderr, disable=None, leave=False, bar_format="{desc}: {elapsed}")
    done = threading.Event()

    def tick():
        while not done.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()


def int_list(text: str) -> list[int]:
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            values.append(int(item))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not a whole number") from None
    return values


def finite_float(text: str) -> float:
    """A number option: argparse's float, but inf and nan are refused (no option means them)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is not a finite number")
    return v


def fraction(text: str) -> float:
    """A fraction option such as SGLang's --mem-fraction-static: a finite number in [0, 1]."""
    v = finite_float(text)
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is not a fraction in [0, 1]")
    return v


def number_list(text: str) -> list[float]:
    values = []
    for item in text.split(","):
        v = finite_float(item)
        values.append(int(v) if v.is_integer() else v)
    return values


def str_list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def add_batch_options(p: argparse.ArgumentParser) -> None:
    """The options that describe one step batch and how it is split (plan, run)."""
    p.add_argument("--strategy", default="engine",
                   help=f"one of {', '.join(STRATEGIES)} (default engine: the --engine release's "
                        "own chunker; the others: what it could do instead)")
    p.add_argument("--engine", default=DEFAULT_ENGINE, type=engine_arg,
                   help="the engine release planned on (its chunker, DeepGEMM, workspace and layout), "
                        "e.g. vllm==0.15.1 or sglang==0.5.23; a bare vllm or sglang: its latest "
                        f"(default: the latest vLLM, {get_engine(DEFAULT_ENGINE).name})")
    p.add_argument("--free-gib", type=finite_float,
                   help="GPU memory free when the step runs, as PyTorch's OOM message reports it (GiB): "
                        "plan and run give the verdict (fits or OOM, exit status 0 or 1) and, unless "
                        "--budget-free-gib, SGLang's budget")
    p.add_argument("--budget-free-gib", type=finite_float,
                   help="SGLang: GPU memory free when the engine measured its logits budget, which it "
                        "caches (GiB; default: --free-gib)")
    add_gpu_option(p, "SGLang's budget is capped from its total memory; a release whose indexer path "
                      "differs on it is refused there")
    p.add_argument("--mem-fraction-static", type=fraction,
                   help="SGLang: the server's --mem-fraction-static, which caps its budget "
                        f"(default {SGLANG_MEM_FRACTION_STATIC}: SGLang's own choice on an H200)")
    p.add_argument("--budget-mb", type=finite_float,
                   help="logits budget in MiB, fractions allowed (default: the release's own for --strategy "
                        "engine; 512, vLLM's default, for a strategy of ours that reads one)")
    p.add_argument("--budget-bytes", type=int, help="logits budget in bytes, instead of --budget-mb")
    p.add_argument("--workspace-tokens", type=int, help="K gather workspace (default: the release's, "
                                                          "40 x max_model_len for vLLM)")
    p.add_argument("--max-model-len", type=int,
                   help="the server's --max-model-len, which sizes vLLM's K workspace (default: the model's)")
    p.add_argument("--query-lens", type=int_list, required=True,
                   help="each request's new tokens in this step (its query rows), comma-separated (required)")
    p.add_argument("--seq-lens", type=int_list, required=True,
                   help="each request's length with them (its KV tokens), comma-separated (required)")
    add_model_option(p)
    p.add_argument("--deepgemm-version",
                   help=f"padding rules: one of {', '.join(DEEPGEMM_RULES)} (default: the --engine "
                        "release's; another version: our strategies on that build instead)")
    p.add_argument("--no-padding", action="store_true",
                   help="budget with vLLM's unpadded M x N x 4 arithmetic")
    p.add_argument("--compressed", action="store_true",
                   help="causal: DeepGEMM's compressed max_seqlen_k rows")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")


def add_server_options(p: argparse.ArgumentParser) -> None:
    """The server flags a step's ledger reads beyond the batch options (docs/design.md#the-ledger)."""
    p.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                   help="the server's --max-num-batched-tokens: rows of the top-k buffer reserved at boot "
                        "(default: the release's)")
    p.add_argument("--gpu-memory-utilization", type=fraction, metavar="F",
                   help="vLLM: the server's --gpu-memory-utilization; without --free-gib the memory free when the "
                        "step runs is derived from it (docs/design.md#the-ledger)")
    p.add_argument("--expandable-segments", action="store_true",
                   help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the caching allocator's line "
                        "(default: off, PyTorch's default)")


def add_model_option(p: argparse.ArgumentParser) -> None:
    """--model, with one default for every subcommand (the grid's: ``DEFAULT_MODEL``)."""
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"one of {', '.join(sorted(MODELS))} (default: {DEFAULT_MODEL})")


def add_gpu_option(p: argparse.ArgumentParser, what: str) -> None:
    """--gpu: one of the GPUs of data/gpus/ (default h200)."""
    p.add_argument("--gpu", default="h200", help=f"one of {', '.join(GPUS)} (default h200; data/gpus/): {what}")


def budget_from_args(args, batch: StepBatch) -> int | None:
    """The budget in bytes: --budget-mb / --budget-bytes, else the default of the strategy
    (the engine's own chunker: the release's own, computed as it computes it; vLLM's 512 MiB for
    the project's budgeted strategies)."""
    if args.budget_mb is not None and args.budget_bytes is not None:
        raise UsageError("--budget-mb and --budget-bytes: give one of them, not both")
    if args.budget_bytes is not None:
        if args.budget_bytes <= 0:
            raise UsageError(f"--budget-bytes {args.budget_bytes}: must be > 0")
        return check_within_gpu("budget_bytes", args.budget_bytes, args.gpu, f"--budget-bytes {args.budget_bytes}")
    if args.budget_mb is not None:
        return check_within_gpu("budget_mb", budget_bytes_from_mb(args.budget_mb), args.gpu,
                                f"--budget-mb {args.budget_mb:g}")
    strategy = get_strategy(args.strategy)
    if strategy.own_build:
        return engine_budget_from_args(args, batch)
    if strategy.budget_source(None) == NO_BUDGET:
        return None
    return budget_bytes_from_mb(512)  # vLLM's default VLLM_SPARSE_INDEXER_MAX_LOGITS_MB


def static_budget_note(args) -> str | None:
    """Where SGLang's C4 indexer is planned without a free-memory reading: the budget taken."""
    engine = get_engine(args.engine)
    if get_model(args.model).qsa:
        return None  # QSA's paths read no free memory
    if (get_model(args.model).kv_ratio == 1 or engine.compressed_budget_rule is None
            or engine.one_call_for(get_model(args.model), get_gpu(args.gpu))
            or get_model(args.model).has_candidates
            or args.free_gib is not None or args.budget_free_gib is not None
            or args.budget_mb is not None or args.budget_bytes is not None or not get_strategy(args.strategy).own_build):
        return None
    return (f"{engine.name}'s budget from its configuration alone (mqa_logits_static_budget_bytes: "
            "min(total x (1 - mem_fraction_static) x f, 0.3 x total)): free memory not given, taken as not "
            "binding (free x f at least that); give --free-gib or --budget-free-gib for the release's min with it")


def engine_budget_from_args(args, batch: StepBatch) -> int | None:
    engine = get_engine(args.engine)
    reading = args.free_gib if args.budget_free_gib is None else args.budget_free_gib
    if engine.one_call_for(get_model(args.model), get_gpu(args.gpu)):
        return None  # its own path reads no budget: SGLang 0.5.12-0.5.20's C4 (ROCm: 0.5.23's), TensorRT-LLM's kpool
    if get_model(args.model).has_candidates and engine.v41_path == "torch":
        return None  # SGLang's torch indexer for DeepSeek-V4.1 reads no budget (engines.v41)
    if get_model(args.model).qsa and engine.qsa_budget_mib is not None:
        return budget_bytes_from_mb(engine.qsa_budget_mib)  # SGLang's QSA path: a constant of its own
    if get_model(args.model).kv_ratio != 1 and engine.compressed_budget_rule is not None:
        # SGLang's C4 indexer: its own budget, read on every forward (the gate is the planner's)
        total = get_gpu(args.gpu).capacity_bytes
        if reading is None:
            return sglang_static_budget(total, mem_fraction_of(args), engine.budget_default)
        return process_budget(engine, free_bytes_from_gib(reading), total,
                              mem_fraction_static=mem_fraction_of(args), compressed=True)
    if engine.budget_rule.startswith("sglang") and reading is None:
        if batch.num_rows * batch.num_kv_tokens < (engine.chunk_skip_elements or 0):
            return None  # the engine reads no budget for this step
        raise UsageError(f"--engine {engine.name} measures its logits budget from free memory: "
                         "give --free-gib or --budget-free-gib (or --budget-mb)")
    free = None if reading is None else free_bytes_from_gib(reading)
    return process_budget(engine, free, get_gpu(args.gpu).capacity_bytes,
                          mem_fraction_static=mem_fraction_of(args), rocm=get_gpu(args.gpu).rocm)


def verdict(plan, args, report=None) -> Ledger:
    """The step's ledger (``ledger.plan_ledger``): what the server reserved at boot, the step's
    transients and the allocator serving them, with a verdict against the memory free when it runs:
    --free-gib as given, or derived from --gpu-memory-utilization (vLLM); no verdict without either.
    ``report``: the step's memory report where the caller counts another backend's temporaries."""
    settings, profile = plan.settings, plan.settings.profile
    given_rows = getattr(args, "max_num_batched_tokens", None) or None
    if profile is not None:  # the release's scheduler: its top-k rows, its most decode tokens (no drafts)
        config = release_scheduler(profile, settings.preset.kv_block, settings.gpu, max_num_batched_tokens=given_rows)
        rows, reserve = config.max_num_batched_tokens, config.most_decode_tokens
    else:
        rows, reserve = given_rows or plan.batch.num_rows, 0
    max_model_len = getattr(args, "max_model_len", None) or settings.preset.max_model_len
    # the server runs the release's knob at the plan's budget (the engine strategy) or its default
    own = plan.strategy == "engine" and profile is not None and profile.engine == "vllm" and plan.budget_bytes
    vllm_budget = plan.budget_bytes / MIB if own else None
    free = None
    if args.free_gib is not None:
        free = given_free(args.free_gib)
    elif getattr(args, "gpu_memory_utilization", None) is not None:
        if profile is None or profile.engine != "vllm":
            raise UsageError("--gpu-memory-utilization is vLLM's: give --engine vllm==X (or --free-gib)")
        free = server_free(settings, vllm_budget, reserve, max_model_len, args.gpu_memory_utilization)
    return plan_ledger(plan, free, max_model_len, rows, vllm_budget, reserve,
                       getattr(args, "expandable_segments", False), report)


def verdict_code(ledger: Ledger) -> int:
    """The exit status a verdict gives: 1 for OOM, else 0 (no verdict asked for included)."""
    return exits.NEGATIVE if ledger.verdict == "oom" else exits.DONE


def verdict_line(ledger: Ledger, over_run: bool = False) -> str | None:
    """The verdict in one line (None: no free memory given): ``fits`` with the most a step-time
    line of the ledger needs, or ``OOM`` with the first that does not fit, against the memory free
    when a step runs.  One step (plan, run, time) says what the step allocates; a run
    (``over_run``: deploy) names the failing line among the run's."""
    if ledger.verdict is None:
        return None
    line = ledger.oom_line
    free = f"{format_bytes(ledger.free_bytes)} free when {'a step' if over_run else 'it'} runs ({ledger.free_source})"
    if over_run and line is None:
        return f"fits: every line fits {free}; the most any asks for is {format_bytes(ledger.needed_bytes)}"
    if over_run:
        return f"OOM: {line.name} needs {format_bytes(line.bytes)} ({line.detail}), against {free}"
    word, needed, what = (("fits", ledger.needed_bytes, "its transient peak, with the caching allocator's segments")
                          if line is None else ("OOM", line.bytes, line.name))
    return (f"{word}: the step allocates {format_bytes(needed)} beyond the buffers it already holds ({what}), "
            f"against {free}")


def strategy_from_args(args) -> Strategy:
    """The strategy named, with --compressed where given."""
    try:
        return get_strategy(args.strategy, **({"compressed": True} if args.compressed else {}))
    except ValueError as e:
        if args.compressed and args.strategy in STRATEGIES:
            raise UsageError(f"--compressed applies to the causal strategy, not {args.strategy!r}") from None
        raise UsageError(str(e)) from None


def settings_from_args(args, strategy: Strategy) -> PlanSettings:
    """The plan settings the options name; the engine's own chunker keeps its release's build and
    arithmetic, so asking it for another is refused."""
    # the CPU reference executor's temporaries; the H200 path's for a compressed-K indexer,
    # which the reference executor does not compute
    temporaries = "deepgemm" if get_model(args.model).compressed else "reference"
    settings = PlanSettings(args.model, args.engine, args.deepgemm_version, not args.no_padding,
                            args.workspace_tokens, temporaries, args.gpu)
    max_model_len = getattr(args, "max_model_len", None)
    if max_model_len is not None:
        settings = with_max_model_len(settings, max_model_len, args)
    if strategy.own_build:
        if args.no_padding:
            raise UsageError("--no-padding: the engine strategy always budgets as the engine does (M x N x 4)")
        own = settings.profile.deepgemm_rules
        if args.deepgemm_version is not None and args.deepgemm_version != own:
            raise UsageError(f"--deepgemm-version {args.deepgemm_version}: the engine strategy runs "
                             f"{settings.engine}'s own build, {settings.profile.deepgemm_build} (DeepGEMM "
                             f"rules {own!r}); give another strategy to try a build")
    return settings


def with_max_model_len(settings: PlanSettings, max_model_len: int, args) -> PlanSettings:
    """The settings of a server started with ``--max-model-len``: the K workspace the release
    sizes from it (unless --workspace-tokens is given), and no sequence longer than it."""
    if max_model_len < 1:
        raise UsageError(f"--max-model-len {max_model_len}: must be >= 1")
    longest = settings.preset.max_model_len
    if max_model_len > longest:
        raise UsageError(f"--max-model-len {max_model_len}: above {settings.model}'s max_model_len {longest}")
    too_long = [s for s in args.seq_lens if s > max_model_len]
    if too_long:
        raise UsageError(f"--seq-lens {too_long[0]} > --max-model-len {max_model_len}: the server refuses it")
    if args.workspace_tokens is not None:
        return settings
    tokens = settings.workspace_at(max_model_len)  # the release's rule, as for the model's own
    return settings if tokens is None else settings.where(workspace_tokens=tokens)


# what one step's plan may hold here, so that plan, time and run answer within seconds and a
# fraction of a GiB: rows past any engine's batch, chunks a budget far below one row's logits makes
MAX_STEP_ROWS = 1 << 21
MAX_PLAN_CHUNKS = 1 << 15


def plan_from_args(args):
    check_seq_lens(args.seq_lens, args.model)  # (a --max-model-len given is checked with the settings)
    batch = StepBatch.from_lengths(args.query_lens, args.seq_lens)
    strategy = strategy_from_args(args)
    settings = settings_from_args(args, strategy)
    check_free_memory(args, settings)
    check_sglang_options(args, strategy, settings)
    budget = budget_from_args(args, batch)
    check_step_size(batch, budget, strategy, settings)
    return make_plan(batch, strategy, budget, settings)


def size_text(nbytes: int) -> str:
    """Bytes as ``format_bytes`` says them, or in bytes below one MiB (a budget of a few bytes)."""
    return format_bytes(nbytes) if nbytes >= 2**20 else f"{nbytes:,} byte{'' if nbytes == 1 else 's'}"


def check_seq_lens(seq_lens: list[int], model: str) -> None:
    """No sequence past the model's own max_model_len, which a server refuses, and no more requests
    in one step than a scheduler runs at once."""
    if len(seq_lens) > MAX_CONCURRENCY:
        raise UsageError(f"--seq-lens: {len(seq_lens):,} requests in one step, more than {MAX_CONCURRENCY:,}")
    longest = get_model(model).max_model_len
    too_long = [n for n in seq_lens if n > longest]
    if too_long:
        raise UsageError(f"--seq-lens {too_long[0]}: past {model}'s max_model_len {longest:,}, which a server refuses")


def mem_fraction_of(args) -> float:
    """SGLang's --mem-fraction-static as given, else its own default."""
    return SGLANG_MEM_FRACTION_STATIC if args.mem_fraction_static is None else args.mem_fraction_static


def check_sglang_options(args, strategy: Strategy, settings: PlanSettings) -> None:
    """SGLang's own options are refused where nothing reads them (never ignored): another engine's
    release, or a strategy of ours, which reads --budget-mb."""
    given = [f for f, v in (("--budget-free-gib", args.budget_free_gib),
                            ("--mem-fraction-static", args.mem_fraction_static)) if v is not None]
    if not given:
        return
    if settings.profile is None or settings.profile.engine != "sglang":
        raise UsageError(f"{given[0]}: an SGLang server's setting, which {settings.engine or 'no engine'} does not read")
    if not strategy.own_build:
        raise UsageError(f"{given[0]}: SGLang's own chunker reads it (--strategy engine); "
                         f"{strategy.name} reads --budget-mb")


def check_free_memory(args, settings: PlanSettings) -> None:
    """--free-gib and --budget-free-gib: readings of the GPU's free memory, so at most its capacity."""
    for flag in ("free_gib", "budget_free_gib"):
        value = getattr(args, flag)
        if value is not None:
            option = "--" + flag.replace("_", "-")
            check_within_gpu(flag, free_bytes_from_gib(value), settings.gpu, f"{option} {value:g}")


def check_step_size(batch: StepBatch, budget: int | None, strategy: Strategy, settings: PlanSettings) -> None:
    """UsageError, before planning, for a step past ``MAX_STEP_ROWS`` query rows or a budget that
    would cut it into more than ``MAX_PLAN_CHUNKS`` chunks: its fp32 logits (M x N x 4 summed over
    its requests) over the budget, but at most one chunk a row where the strategy cuts rows only."""
    if batch.num_rows > MAX_STEP_ROWS:
        raise UsageError(f"--query-lens: {batch.num_rows:,} query rows in one step, more than "
                         f"{MAX_STEP_ROWS:,} (no engine batches that many tokens in one step)")
    if budget is None:
        return
    logits = sum(unpadded_logits_bytes(r.query_len, max(1, r.seq_len)) for r in settings.view(batch).requests)
    chunks = -(-logits // budget)
    if not strategy.cuts_columns:  # one row a chunk at the least
        chunks = min(chunks, batch.num_rows)
    if chunks > MAX_PLAN_CHUNKS:
        shown = size_text(budget)
        floor = math.ceil(logits / MAX_PLAN_CHUNKS / 2**20 * 100) / 100  # MiB, rounded up as shown
        raise UsageError(f"budget {shown}: the step's {format_bytes(logits)} of logits would take at least "
                         f"{chunks:,} chunks, more than {MAX_PLAN_CHUNKS:,} planned here; give a budget of at "
                         f"least {floor:,.2f} MiB")


def kv_cache_tokens_arg(text: str) -> int | str:
    """--kv-cache-tokens: a whole number of tokens >= 0, or 'auto'."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is neither a whole number of tokens nor 'auto'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"kv_cache_tokens {value}: must be >= 0 (0: room for every running request)")
    return value


def engine_arg(text: str) -> str:
    """An --engine value as the profiles name it (case, spaces and a leading v do not matter);
    a pre-release or development build is planned as its release, with a note on stderr."""
    from ..engines.profiles import normalise_engine

    name, note = normalise_engine(text)
    if note:
        print(f"indexer-lab: note: {note}", file=sys.stderr)
    return name
