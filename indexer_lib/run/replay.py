"""The engine's own indexer prefill, replayed on the meta device, next to the memory model.

``replay_steps("vllm==0.33.0", "glm-5", [(query_lens, seq_lens), ...])`` runs the release's
own code (``indexer_lib/engines/vllm_replay.py``, in the Python environment that holds that release:
the project's ``.venv`` for the vLLM it installs, ``.venv-engines/vllm-X`` for the others,
see scripts/install_engines.sh) and returns, per step, the peak bytes of the real code path,
every allocation it made, its logits calls, and the memory model's figures for the same
engine profile (``memory_report(..., temporaries="replay")``).  Each step is replayed as the
server lives it: a fresh workspace manager, the profile run (the dummy forward), then the
step.  Numbers are measured from the engine's code on meta tensors; the logits allocation
inside DeepGEMM, which cannot run on a CPU, follows the release's DeepGEMM padding rules
(``indexer_lib.padding``).
"""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..refdata import DATA_DIR
from ..presets import get_model
from ..workload import StepBatch
from ..engines import EngineProfile, get_engine, profile_run_logits_bytes, replayed_engines
from ..memory import make_plan, memory_report, topk_buffer_bytes
from ..memory.replayed import workspace_path_bytes
from ..plan import PlanSettings

DRIVER = Path(__file__).resolve().parent.parent / "engines" / "vllm_replay.py"
REPO = DATA_DIR.parent
MAX_NUM_BATCHED_TOKENS = 8192  # the engines' default on an H200: the top-k buffer's rows
LIMIT = 1 << 20  # budgets in MiB and top-k rows above this (1 TiB, a million rows) are no GPU's


@dataclass(frozen=True)
class StepReplay:
    """One step replayed through the engine's own code, and what the model says of it."""

    engine: str
    model: str
    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    budget_mb: int | None  # the logits budget the release planned with (None: it has none)
    peak_bytes: int  # live bytes at the peak of the step: top-k buffer, workspace, metadata, call
    persistent_bytes: int  # what was alive before the step: the top-k buffer and the workspace
    metadata_bytes: int  # the chunk metadata the builder made for the step
    chunks: tuple[tuple[int, int, int, int], ...]  # (request start, end, row start, end) per chunk
    logits_calls: tuple[tuple[int, int], ...]  # the logits shape of each call
    logits_allocated_bytes: tuple[int, ...]  # what DeepGEMM allocated for each
    profile_run_peak_bytes: int  # the dummy forward's peak (the budget's torch.empty included)
    profile_run_reserved_bytes: int  # what it left reserved: top-k buffer and workspace
    seconds: float  # the replay's own time (profile run, metadata and call)
    modelled_peak_bytes: int  # memory_report(plan, temporaries="replay").peak, same profile
    modelled_chunks: tuple[tuple[int, int, int, int], ...]
    allocations: tuple[dict, ...] = field(default=(), repr=False)  # record=True: every storage

    @property
    def difference_bytes(self) -> int:
        """Modelled minus replayed peak (0: the model is exact on this step)."""
        return self.modelled_peak_bytes - self.peak_bytes

    def to_row(self) -> dict:
        return {"engine": self.engine, "model": self.model, "requests": len(self.query_lens),
                "rows": sum(self.query_lens), "kv_tokens": sum(self.seq_lens),
                "longest": max(self.seq_lens), "budget_mb": self.budget_mb,
                "chunks": len(self.chunks), "replayed_peak_bytes": self.peak_bytes,
                "modelled_peak_bytes": self.modelled_peak_bytes,
                "difference_bytes": self.difference_bytes,
                "metadata_bytes": self.metadata_bytes,
                "profile_run_reserved_bytes": self.profile_run_reserved_bytes,
                "unreserved_bytes": self.peak_bytes - self.profile_run_peak_bytes,
                "seconds": self.seconds}


@dataclass(frozen=True)
class ProfileRunReplay:
    """The dummy forward alone: what vLLM reserves for the indexer at start-up."""

    engine: str
    model: str
    budget_mb: int | None
    peak_bytes: int  # top-k buffer + workspace + the budget's torch.empty (0.19.0+)
    reserved_bytes: int  # what stays: top-k buffer and workspace
    modelled_peak_bytes: int
    modelled_reserved_bytes: int


def replayable(engine) -> EngineProfile:
    """The profile of a release whose path the project replays (ValueError otherwise)."""
    profile = get_engine(engine)
    if profile.engine != "vllm" or profile.path is None:
        replayed = ", ".join(replayed_engines())
        raise ValueError(f"engine {profile.name}: its indexer path is not replayed; the replay drives "
                         f"{replayed}")
    return profile


def engine_python(engine) -> str:
    """The Python of the environment that holds the release (ValueError with the install line)."""
    profile = replayable(engine)
    if _installed_vllm() == profile.release:
        return sys.executable
    candidate = REPO / ".venv-engines" / f"vllm-{profile.release}" / "bin" / "python"
    if candidate.exists():
        return str(candidate)
    # the latest vLLM is the project's own (scripts/install_vllm.sh), the others sit in .venv-engines
    install = ("bash scripts/install_vllm.sh" if profile == get_engine("vllm")
               else f"bash scripts/install_engines.sh vllm-{profile.release}")
    raise ValueError(f"engine {profile.name} is not installed here: {install}")


def _installed_vllm() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _request(profile: EngineProfile, model: str, steps, budget_mb, max_num_batched_tokens: int,
             record: bool) -> dict:
    """``steps``: (query_lens, seq_lens, budget MiB) per step."""
    preset = get_model(model)
    if preset.compressed:
        ratio = max(k.compress_ratio for k in preset.indexing_kinds)
        raise ValueError(f"{model}: its indexer scores {ratio}x-compressed K; the replay drives the "
                         "uncompressed (DeepSeek-V3.2) path only")
    return {
        "steps": [{"query_lens": list(q), "seq_lens": list(s), "max_logits_mb": b} for q, s, b in steps],
        "max_logits_mb": budget_mb,
        "model": {"index_heads": preset.index_heads, "head_dim": preset.head_dim, "topk": preset.topk,
                  "max_model_len": preset.max_model_len, "kv_block": preset.kv_block,
                  "hidden_size": 1},  # the hidden states' width is never read, only their rows
        "max_num_batched_tokens": max_num_batched_tokens,
        "workspace_tokens": profile.workspace_tokens(preset.max_model_len),
        "deepgemm": {"version": profile.deepgemm_rules, "heads": preset.index_heads},
        "record": record,
    }


class ReplayProcess:
    """A running replay driver for one release: vLLM is imported once (a slow import), then each request
    is one line in and one line out.  ``with ReplayProcess("vllm==0.33.0") as p: replay_steps(...,
    process=p)``; a sweep keeps one per release for all its points."""

    def __init__(self, engine, timeout: float | None = 600):
        self.profile = replayable(engine)
        self.python = engine_python(self.profile)
        self.timeout = timeout  # seconds per request, vLLM's import included for the first
        self._stderr = tempfile.TemporaryFile(mode="w+")  # vLLM logs there; its tail explains a failure
        self._proc = subprocess.Popen([self.python, str(DRIVER)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, text=True)

    def ask(self, request: dict) -> dict:
        killer = threading.Timer(self.timeout, self._proc.kill) if self.timeout else None
        if killer:
            killer.start()
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        finally:
            if killer:
                killer.cancel()
        if not line:
            code = self._proc.wait()
            self._stderr.seek(0)
            tail = self._stderr.read().strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the replay of {self.profile.name} failed (exit {code}): {tail[0]}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.profile.name} cannot be driven: {answer['error']}")
        if answer["vllm"] != self.profile.release:
            raise RuntimeError(f"{self.python} holds vllm {answer['vllm']}, not {self.profile.release}")
        return answer

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _ask(profile: EngineProfile, request: dict, process: ReplayProcess | None, timeout) -> dict:
    """One request, to the given process (which must run this release) or to a process of its own."""
    if process is not None:
        if process.profile != profile:
            raise ValueError(f"the replay process runs {process.profile.name}, not {profile.name}")
        return process.ask(request)
    with ReplayProcess(profile, timeout) as own:
        return own.ask(request)


def check_tokens(max_num_batched_tokens: int) -> None:
    if not 1 <= max_num_batched_tokens <= LIMIT:
        raise ValueError(f"max_num_batched_tokens {max_num_batched_tokens}: must be from 1 to {LIMIT} "
                         "(the rows of the engine's top-k buffer)")


def _budget_mb(profile: EngineProfile, budget_mb) -> int | None:
    if profile.chunker != "logits-budget":
        if budget_mb is not None:
            raise ValueError(f"budget_mb {budget_mb!r}: {profile.name} has no logits budget "
                             f"(its chunker: {profile.chunker})")
        return None
    if budget_mb is None:
        return int(profile.budget_default)
    if isinstance(budget_mb, bool) or not isinstance(budget_mb, int) or not 1 <= budget_mb <= LIMIT:
        raise ValueError(f"budget_mb {budget_mb!r}: must be a whole number of MiB from 1 to {LIMIT} "
                         f"({profile.budget_env} is an integer)")
    return budget_mb


def replay_steps(engine, model: str, steps, budget_mb: int | None = None,
                 max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS, record: bool = False,
                 timeout: float | None = 600, process: ReplayProcess | None = None) -> list[StepReplay]:
    """Replay each ``(query_lens, seq_lens)`` step (or ``(query_lens, seq_lens, budget_mb)``)
    through the release's own code, all in one process.

    ``budget_mb``: ``VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`` of the steps that name none (default
    the release's; releases without a budget take None).  ``record``: keep every allocation.
    ``process``: a running ``ReplayProcess`` of the release (default: one for this call).
    """
    profile = replayable(engine)
    if not steps:
        raise ValueError("steps is empty: give at least one (query_lens, seq_lens)")
    check_tokens(max_num_batched_tokens)
    cases = []
    for step in steps:
        q, s, *own = step
        batch = StepBatch.from_lengths(q, s)  # bad lengths say so here
        if batch.num_rows > max_num_batched_tokens:
            raise ValueError(f"a step of {batch.num_rows} rows > max_num_batched_tokens "
                             f"{max_num_batched_tokens}: the engine's top-k buffer has that many rows")
        cases.append((batch, _budget_mb(profile, own[0] if own else budget_mb)))
    request = _request(profile, model, [(b.query_lens, b.seq_lens, mb) for b, mb in cases], None,
                       max_num_batched_tokens, record)
    answer = _ask(profile, request, process, timeout)
    out = []
    for (batch, budget), r in zip(cases, answer["results"]):
        if "error" in r:
            raise RuntimeError(f"{profile.name} step {list(batch.query_lens)} x {list(batch.seq_lens)}: "
                               f"{r['error']}")
        plan = make_plan(batch, "engine", None if budget is None else budget << 20,
                         PlanSettings(model, profile, temporaries="replay"))
        report = memory_report(plan, topk_rows=max_num_batched_tokens)
        modelled = tuple((c.requests[0], c.requests[1], c.rows[0], c.rows[1]) for c in plan.chunks)
        out.append(StepReplay(
            profile.name, model, batch.query_lens, batch.seq_lens, budget, r["peak_bytes"],
            r["persistent_bytes"], r["metadata_bytes"], tuple(tuple(c) for c in r["chunks"]),
            tuple(tuple(s) for s in r["logits_calls"]), tuple(r["logits_allocated_bytes"]),
            r["profile_run"]["peak_bytes"], r["profile_run"]["reserved_bytes"], r["seconds"],
            report.peak, modelled, tuple(r.get("allocations", ()))))
    return out


def replay_profile_run(engine, model: str, budget_mb: int | None = None,
                       max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
                       timeout: float | None = 600) -> ProfileRunReplay:
    """The dummy forward alone, next to what the model says it reserves."""
    profile = replayable(engine)
    budget = _budget_mb(profile, budget_mb)
    check_tokens(max_num_batched_tokens)
    request = _request(profile, model, [], budget, max_num_batched_tokens, False)
    answer = _ask(profile, request, None, timeout)
    r = answer["results"][0]
    if "error" in r:
        raise RuntimeError(f"{profile.name} profile run: {r['error']}")
    preset = get_model(model)
    reserved = (workspace_path_bytes(profile, profile.workspace_tokens(preset.max_model_len),
                                     preset.head_dim, preset.k_bytes_per_token - preset.head_dim)
                + topk_buffer_bytes(max_num_batched_tokens, preset.topk))
    logits = profile_run_logits_bytes(profile, budget) if budget is not None else 0
    return ProfileRunReplay(profile.name, model, budget, r["profile_run"]["peak_bytes"],
                            r["profile_run"]["reserved_bytes"], reserved + logits, reserved)


def replay_cases(engine, model: str, cases, timeout: float | None = 600) -> list[tuple]:
    """(case, StepReplay) for each ``replay_cases.ReplayCase``, in one process (one request per top-k
    buffer size).  A release without a logits budget replays every case without one."""
    profile = replayable(engine)
    budgeted = profile.chunker == "logits-budget"
    out: dict[int, StepReplay] = {}
    with ReplayProcess(profile, timeout) as process:
        for rows in sorted({c.max_num_batched_tokens for c in cases}):
            group = [(i, c) for i, c in enumerate(cases) if c.max_num_batched_tokens == rows]
            steps = [(c.query_lens, c.seq_lens, c.budget_mb if budgeted else None) for _, c in group]
            for (i, _), r in zip(group, replay_steps(profile, model, steps, max_num_batched_tokens=rows,
                                                     process=process)):
                out[i] = r
    return [(c, out[i]) for i, c in enumerate(cases)]
