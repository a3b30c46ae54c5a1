"""A simulator of vLLM V1's chunked-prefill scheduler, closed loop.

It turns a workload (C clients, prompts of ISL tokens, OSL output tokens) and the
scheduler's settings into the engine's steps, each with its prefill ``StepBatch``.
The rules it follows are in docs/design.md#the-scheduler-that-produces-the-batches;
``workload.compare`` holds it next to vLLM's own scheduler.
"""
from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

from ..checks import BadValue
from .batch import PrefillRequest, StepBatch, check_int
from .kv_blocks import BlockPool
from .ranks import rank_workload
from .lengths import (arrange, check_order, check_range_ratio, draw_lengths, length_bounds, mix_prompts, mix_text,
                      parse_mix)


MAX_CONCURRENCY = 65_536  # requests in flight; engines schedule at most a few thousand at once
MAX_BATCHED_TOKENS = 1 << 31  # tokens per step; above every model's max_model_len, and the top-k buffer's rows
MAX_OSL = 1 << 20  # output tokens per request; above every model's max_model_len
MAX_SPECULATIVE_TOKENS = 64  # draft tokens per step; engines run a handful
# engine steps of one schedule, at the least: each takes the simulator a few tens of microseconds
# and each prefill step's batch is held, so past this one workload takes minutes and GiBs
MAX_SCHEDULE_STEPS = 500_000


@dataclass(frozen=True)
class SchedulerConfig:
    """The vLLM V1 scheduler settings that shape prefill batches."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    long_prefill_token_threshold: int = 0  # 0: no cap per request
    enable_prefix_caching: bool = True
    block_size: int = 64
    async_scheduling: bool = False  # the async scheduler learns of finishes one step later
    # KV cache capacity in blocks; 0: enough for every running request (no preemption)
    num_kv_blocks: int = 0
    # how the release gates admissions and returns blocks with a finite KV cache
    # (docs/design.md#preemption; each release's own rule in data/engines/): True, a waiting request
    # is admitted only when its whole sequence fits (vLLM 0.19.0 on, scheduler_reserve_full_isl);
    # False, when its first chunk does (vLLM 0.13-0.18)
    reserve_full_isl: bool = True
    # True: freed blocks no prefix-cache entry holds go to the free queue's front, to be reused
    # first, the cached ones to its end (vLLM 0.30.0 on); False: every freed block to its end
    free_uncached_first: bool = True
    # True: the threshold caps no chunk while only one request is running or waiting (vLLM 0.33.0);
    # False: it caps every chunk (vLLM 0.13-0.32)
    threshold_lone_exempt: bool = True
    # with speculative decoding: a waiting request with one token left to compute (a full
    # prefix-cache hit) is scheduled as a decode padded to 1 + drafts tokens while no running request
    # took a prefill chunk this step, or not at all when they do not fit (vLLM 0.30.0 on); False: its
    # one token (before)
    pad_new_decodes: bool = False
    # speculative decoding (MTP, EAGLE): each decoding request schedules its sampled token and
    # this many draft tokens per step, and every draft is taken as accepted (an assumption: the
    # most output per step); 0: none, vLLM's default
    speculative_tokens: int = 0
    # the most new tokens a request may have and still take the indexer's decode path; more, and
    # the indexer computes its logits in the prefill path with its whole context (decodes with
    # drafts included).  0: 1 + speculative_tokens; each release's own rule in data/engines/
    indexer_decode_threshold: int = 0
    # the data-parallel ranks this scheduler is one of (SGLang's DP attention): each rank runs its
    # own scheduler on its share of the clients, dealt round robin (``ranks``), and the steps
    # simulated are the busiest rank's; 1: one scheduler serves every client
    dp: int = 1

    def __post_init__(self):
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1, MAX_BATCHED_TOKENS)
        check_int("max_num_seqs", self.max_num_seqs, 1, MAX_CONCURRENCY)
        check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        check_int("block_size", self.block_size, 1)
        check_int("num_kv_blocks", self.num_kv_blocks, 0)
        check_int("speculative_tokens", self.speculative_tokens, 0, MAX_SPECULATIVE_TOKENS)
        check_int("indexer_decode_threshold", self.indexer_decode_threshold, 0)
        check_int("dp", self.dp, 1, MAX_CONCURRENCY)

    @property
    def most_decode_tokens(self) -> int:
        """The most decode tokens one step holds: every running request with its drafts, within the
        step's budget (what vLLM 0.33.0's kpool profile run sizes its decode logits for)."""
        return min(self.max_num_seqs * (1 + self.speculative_tokens), self.max_num_batched_tokens)

    @property
    def decode_threshold(self) -> int:
        """New tokens up to which a request takes the indexer's decode path."""
        return self.indexer_decode_threshold or 1 + self.speculative_tokens




# how a title or a summary names a run that starts with a warm prefix cache (not the default)
WARM_CACHE = "every prompt in the prefix cache when the run starts (warm cache)"


@dataclass(frozen=True)
class ClosedLoopWorkload:
    """C clients, each sending a prompt and waiting for ``osl`` output tokens before sending the
    next, until ``num_prompts`` were sent.

    Prompt lengths (``prompt_lens``, docs/design.md#mixed-lengths): every prompt has ``isl``
    tokens unless ``random_range_ratio`` R > 0, which draws each from [ISL x (1 - R),
    ISL x (1 + R)] as vLLM's benchmark does, or ``mix`` puts a share of the prompts at other
    lengths ("0.1x131072": a tenth at 131,072 tokens).  Drawn once for the whole run from
    ``seed``: the k-th prompt sent takes the k-th length, so a mix is one schedule.  ``order``
    sends the same lengths in another order ("longest-first", ...; lengths.ORDERS), "drawn" in
    the draw's.  The defaults (R = 0, no mix) are the homogeneous workload.  ``warm_cache``: every
    prompt's blocks are in the prefix cache before the run (a rerun of the same prompts), so each
    request computes only the tokens past its last cached full block, at least its last one."""

    concurrency: int
    isl: int
    osl: int = 1
    shared_prefix: int = 0  # leading tokens every prompt shares (prefix cache)
    num_prompts: int | None = None  # default: two waves, 2 x concurrency
    random_range_ratio: float = 0.0  # vLLM bench's --random-range-ratio, on input lengths only
    mix: tuple[tuple[float, int], ...] = ()  # (share, length) of prompts not at isl; or "0.1x131072"
    seed: int = 0  # of the length draws (vLLM bench's default seed is 0 too)
    order: str = "drawn"  # the arrival order of the drawn lengths (lengths.ORDERS)
    # every prompt is in the prefix cache when the run starts: a rerun of the same prompts, as
    # ``vllm bench serve``'s seeded random prompts are when it runs again (docs/design.md#warm-cache)
    warm_cache: bool = False

    def __post_init__(self):
        # the simulator runs every request and every decode step: bounds that no deployment
        # reaches keep a typo (an extra zero or ten) from running for hours
        check_int("concurrency", self.concurrency, 1, MAX_CONCURRENCY)
        check_int("isl", self.isl, 1)
        check_int("osl", self.osl, 1, MAX_OSL)
        check_int("shared_prefix", self.shared_prefix, 0)
        if self.num_prompts is not None:
            check_int("num_prompts", self.num_prompts, 1)
        object.__setattr__(self, "random_range_ratio", check_range_ratio(self.random_range_ratio))
        object.__setattr__(self, "mix", parse_mix(self.mix))
        check_int("seed", self.seed, 0)
        check_order(self.order)
        low, _ = length_bounds(self.isl, self.random_range_ratio)
        if low < 1:
            raise BadValue("random_range_ratio", f"random_range_ratio {self.random_range_ratio:g} on isl "
                           f"{self.isl}: the shortest prompt would have {low} tokens (needs >= 1)")
        mix_prompts(self.mix, self.total_prompts)  # refuses a mix that takes more prompts than are sent
        shortest = min([low] + [length for _, length in self.mix])
        if self.shared_prefix > shortest:
            raise ValueError(
                f"shared_prefix {self.shared_prefix} > isl {shortest}"
                + (" (the shortest prompt)" if shortest != self.isl else "")
                + ": the shared prefix is part of the prompt"
            )

    @property
    def total_prompts(self) -> int:
        return self.num_prompts if self.num_prompts is not None else 2 * self.concurrency

    @property
    def homogeneous(self) -> bool:
        return self.random_range_ratio == 0 and not self.mix

    @functools.cached_property  # frozen: cached in the instance's __dict__, not a field
    def prompt_lens(self) -> tuple[int, ...]:
        """The length of every prompt, in the order they are sent."""
        if self.homogeneous:
            return (self.isl,) * self.total_prompts
        lens = draw_lengths(self.isl, self.total_prompts, self.random_range_ratio, self.mix, self.seed)
        return arrange(lens, self.order, self.isl, self.concurrency)

    @property
    def max_prompt_len(self) -> int:
        """The longest prompt the workload can send, whatever the seed (what must fit in
        ``max_model_len``)."""
        return max([length_bounds(self.isl, self.random_range_ratio)[1]] + [n for _, n in self.mix])

    @property
    def label(self) -> str:
        """The lengths in a few characters: '' when homogeneous, else 'R=0.5', 'mix 0.1x131072' (and
        'order longest-first' where the order is not the draw's)."""
        parts = [f"R={self.random_range_ratio:g}"] if self.random_range_ratio else []
        parts += [f"mix {mix_text(self.mix)}"] if self.mix else []
        parts += [f"order {self.order}"] if parts and self.order != "drawn" else []
        parts += ["warm cache"] if self.warm_cache else []
        return ", ".join(parts)


@dataclass
class _Request:
    rid: int
    prompt_len: int
    computed: int = 0  # tokens whose KV is computed (or cached)
    outputs: int = 0  # output tokens sampled
    blocks: list = field(default_factory=list)  # its KV blocks (a finite KV cache only)
    cached: int = 0  # of its tokens, those in full blocks the prefix cache holds (idem)
    in_flight: int = 0  # async: of its outputs, those sampled in the step in flight (the scheduler's
    # next pass does not know them yet)

    @property
    def num_tokens(self) -> int:
        """Its prompt and the tokens it sampled: what it computes before it samples again after
        a preemption."""
        return self.prompt_len + self.outputs

    @property
    def decoding(self) -> bool:
        """Past its prompt and its recomputation: it computes its last sampled token (and drafts)."""
        return self.outputs > 0 and self.computed >= self.num_tokens - 1


@dataclass
class ScheduledStep:
    """One engine step: its prefill batch and how many decode tokens rode along."""

    step: int
    batch: StepBatch | None  # None when the step had no prefill rows
    num_decode: int
    request_ids: tuple[int, ...] = field(default=())  # ids of the requests of the prefill rows, in order


def kv_blocks_needed(workload: ClosedLoopWorkload, config: SchedulerConfig) -> int:
    """KV blocks that hold every request the schedule can run at once, each to
    its last token, counting no prefix block as shared (requests admitted while
    the prefix is still being computed compute their own copy)."""
    per_request = -(-(workload.max_prompt_len + workload.osl) // config.block_size)
    return min(workload.concurrency, config.max_num_seqs, workload.total_prompts) * per_request


def kv_pressure(workload: ClosedLoopWorkload, config: SchedulerConfig) -> bool:
    """Whether the KV cache is small enough for admission and preemption to shape the schedule
    (docs/design.md#preemption); refuses what the simulator does not model there."""
    need = kv_blocks_needed(workload, config)
    if not config.num_kv_blocks or config.num_kv_blocks >= need:
        return False
    one = -(-(workload.max_prompt_len + workload.osl) // config.block_size)
    if config.num_kv_blocks - 1 < one:  # block 0 is vLLM's null block
        raise ValueError(f"num_kv_blocks {config.num_kv_blocks}: below the {one} blocks one request of "
                         f"{workload.max_prompt_len} + {workload.osl} tokens needs (vLLM would never admit it)")
    below = (f"num_kv_blocks {config.num_kv_blocks}: below the {need} blocks the running requests of "
             f"{workload.max_prompt_len} + {workload.osl} tokens can hold; the simulator models preemption")
    if workload.warm_cache:
        raise ValueError(f"{below} without a warm cache (which prompts a full cache still holds is not "
                         "modelled): give a KV cache with room for every running request")
    if workload.shared_prefix:
        raise ValueError(f"{below} without a shared prefix: vLLM's own scheduler models one "
                         "(--workload-source vllm, source='vllm')")
    if config.async_scheduling and config.speculative_tokens:
        # nor does the drive of vLLM's scheduler, which plays drafts on the synchronous one only
        raise ValueError(f"{below} with speculative decoding on the synchronous scheduler only "
                         "(--no-async-scheduling)")
    return True


def check_kv_capacity(workload: ClosedLoopWorkload, config: SchedulerConfig) -> None:
    """Refuse a KV cache the simulator cannot schedule (see ``kv_pressure``)."""
    kv_pressure(workload, config)


class _Engine:
    """The simulated engine between steps: who waits, who runs, what is cached, who arrives when."""

    def __init__(self, workload: ClosedLoopWorkload, config: SchedulerConfig):
        workload = rank_workload(workload, config.dp)  # one rank's clients, where there are several
        self.workload, self.config = workload, config
        # a KV cache too small for every running request: blocks are counted, admissions gated and
        # requests preempted as vLLM does; otherwise nothing waits on blocks and none are counted
        self.pool = BlockPool(config.num_kv_blocks, config.free_uncached_first) \
            if kv_pressure(workload, config) else None
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.sent = 0
        self.cached_prefix = 0  # tokens of the shared prefix whose blocks are in the prefix cache
        self.arrivals: deque[tuple[int, int]] = deque()  # (tick at which they arrive, count)
        self.made: dict[tuple[int, int], PrefillRequest] = {}
        self.tick = 0  # scheduling passes, empty ones included (they pace async arrivals)
        self.step = 0  # executed engine steps
        self.preempted_now = False  # the pass being scheduled preempted a request
        self.sampled: list[_Request] = []  # async: the requests that sampled in the step in flight
        self.send(workload.concurrency)

    def send(self, n: int) -> None:
        lens = self.workload.prompt_lens
        for _ in range(min(n, self.workload.total_prompts - self.sent)):
            self.waiting.append(_Request(self.sent, lens[self.sent]))
            self.sent += 1

    def busy(self) -> bool:
        """Let in the requests that have arrived; whether anyone is left to schedule."""
        # an idle engine runs no step: the next client request starts the next one
        while self.arrivals and (self.arrivals[0][0] <= self.tick or not (self.waiting or self.running)):
            self.send(self.arrivals.popleft()[1])
        return bool(self.waiting or self.running)

    def request(self, context_len: int, query_len: int) -> PrefillRequest:
        # a schedule repeats a few request shapes thousands of times: one object each
        key = (context_len, query_len)
        r = self.made.get(key)
        if r is None:
            r = self.made[key] = PrefillRequest(context_len, query_len)
        return r

    def cacheable_prefix(self, req: _Request, n: int) -> int:
        # vLLM caches the full blocks of scheduled tokens when it schedules them, so a request
        # admitted later in the same step can already hit them
        if not (self.config.enable_prefix_caching and self.workload.shared_prefix):
            return 0
        return min(req.computed + n, self.workload.shared_prefix) // self.config.block_size * self.config.block_size

    def schedule(self) -> tuple[list, int]:
        """One scheduling pass: ((request, tokens, decoding) in the order scheduled, how many ran
        when it was scheduled)."""
        budget = self.config.max_num_batched_tokens
        drafts = self.config.speculative_tokens
        threshold = self.config.long_prefill_token_threshold
        cap_chunks = threshold > 0 and (len(self.running) + len(self.waiting) > 1
                                        or not self.config.threshold_lone_exempt)
        scheduled = []

        def chunk(req: _Request, computed: int | None = None) -> int:
            # its prompt, or all it had before a preemption, past its computed tokens (or ``computed``)
            n = req.num_tokens - (req.computed if computed is None else computed)
            return min(min(n, threshold) if cap_chunks else n, budget)

        prefill_chunk_scheduled = False  # a running request took a chunk that leaves its prompt unfinished
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            i += 1
            if req.outputs >= self.workload.osl:
                continue  # async: finished in the step in flight, not yet removed
            decoding = req.decoding
            n = min(1 + drafts, budget) if decoding else chunk(req)  # a decode: its token and drafts
            if self.pool is not None and not self.allocate_running(req, n):
                break  # it preempted itself: nobody after it runs this step
            scheduled.append((req, n, decoding))
            budget -= n
            if not decoding:
                self.cached_prefix = max(self.cached_prefix, self.cacheable_prefix(req, n))
                prefill_chunk_scheduled |= req.computed + n < req.num_tokens
        ran = bool(scheduled)  # running requests scheduled this step
        # a step that preempted admits nobody
        while (self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs
               and not self.preempted_now):
            req = self.waiting[0]
            if self.pool is not None and not self.admit(req, chunk):
                break
            self.waiting.popleft()
            if self.config.enable_prefix_caching and self.workload.warm_cache:
                # vLLM hits at most prompt_len - 1 tokens, in whole blocks: the last token is recomputed
                req.computed = (req.prompt_len - 1) // self.config.block_size * self.config.block_size
            elif self.config.enable_prefix_caching and self.workload.shared_prefix:
                hit = min(self.cached_prefix, self.workload.shared_prefix, req.prompt_len - 1)
                req.computed = hit // self.config.block_size * self.config.block_size
            n = chunk(req)
            if (drafts and self.config.pad_new_decodes and self.pool is None and req.num_tokens - req.computed == 1
                    and not prefill_chunk_scheduled and (ran or req.computed > 0)):
                # a full prefix-cache hit scheduled as a decode with placeholder drafts (with a
                # finite KV cache, a resumed request's hit is not padded here: not modelled)
                if 1 + drafts > budget:
                    self.waiting.appendleft(req)
                    break
                n = 1 + drafts
            self.running.append(req)
            if self.pool is not None:
                self.allocate(req, n)
            scheduled.append((req, n, False))
            budget -= n
            self.cached_prefix = max(self.cached_prefix, self.cacheable_prefix(req, n))
        self.preempted_now = False
        scheduled_with = len(self.running)
        # async: the requests that finished in the previous step leave now, and their blocks go back
        if self.pool is not None and self.config.async_scheduling:
            for req in self.running:
                if req.outputs >= self.workload.osl:
                    self.release(req)
        self.running = [r for r in self.running if r.outputs < self.workload.osl]
        return scheduled, scheduled_with

    # a finite KV cache (self.pool), as vLLM's scheduler and KV cache manager keep it
    def blocks_to_hold(self, req: _Request, n: int) -> int:
        """New blocks the request needs to hold its computed tokens and ``n`` more."""
        return max(-(-(req.computed + n) // self.config.block_size) - len(req.blocks), 0)

    def allocate(self, req: _Request, n: int) -> None:
        req.blocks += self.pool.take(self.blocks_to_hold(req, n))
        # vLLM caches the full blocks of the tokens scheduled, drafts aside (not yet tokens), and
        # (async) the token sampled in the step in flight aside (not yet known)
        req.cached = max(req.cached, min(req.computed + n, req.num_tokens - req.in_flight))

    def allocate_running(self, req: _Request, n: int) -> bool:
        """Blocks for a running request's tokens, preempting the last running request while too
        few are free; False when it had to preempt itself."""
        while self.pool.num_free < self.blocks_to_hold(req, n):
            victim = self.running.pop()
            self.preempt(victim)
            if victim is req:
                return False
        self.allocate(req, n)
        return True

    def preempt(self, req: _Request) -> None:
        """Its blocks go back (its full ones still cached), it computes again from its first
        token, and it waits first in line."""
        self.pool.release(req.rid, req.blocks, req.cached // self.config.block_size)
        req.blocks, req.computed, req.cached = [], 0, 0
        # (async) a request whose last output, in flight, finishes it leaves when that output comes
        # (vLLM 0.33.0 v1/core/sched/scheduler.py:2494, :2545-2548)
        if req.outputs < self.workload.osl:
            self.waiting.appendleft(req)
        self.preempted_now = True

    def admit(self, req: _Request, chunk) -> bool:
        """Whether the waiting request is admitted now: its whole sequence must fit in the free
        blocks (vLLM 0.19.0 on), or only what it holds after its first chunk (``chunk(req)``,
        vLLM 0.13-0.18).  A preempted one takes back its full blocks still cached, short of its
        last token; they count among the free blocks and among those it needs."""
        size = self.config.block_size
        # (a request never preempted has none of its own blocks cached)
        hits = self.pool.hits(req.rid, (req.num_tokens - 1) // size)
        if self.config.reserve_full_isl:
            need = -(-req.num_tokens // size)
        else:
            need = -(-(len(hits) * size + chunk(req, len(hits) * size)) // size)  # it starts after its hits
        if self.pool.num_free < need:
            return False
        self.pool.touch(hits)
        req.blocks, req.computed = hits, len(hits) * size
        req.cached = req.computed
        return True

    def release(self, req: _Request) -> None:
        """A finished request's blocks go back, its full ones cached."""
        self.pool.release(req.rid, req.blocks, req.cached // self.config.block_size)
        req.blocks = []

    def rows(self, scheduled: list) -> list:
        """The (request, tokens) the indexer's prefill path computes: every prompt chunk, and every
        decode with more new tokens than the release's indexer takes in its decode path."""
        threshold = self.config.decode_threshold
        return [(r, n) for r, n, decoding in scheduled
                if (not decoding and r.computed < r.prompt_len) or n > threshold]

    def executed(self, batch: StepBatch | None, num_decode: int, rids: tuple[int, ...]) -> ScheduledStep:
        """The step as the engine executes it (numbered), with its prefill batch."""
        step = ScheduledStep(self.step, batch, num_decode, rids)
        self.step += 1
        return step

    def advance(self, scheduled: list) -> int:
        """Prefill chunks compute KV and sample a token when the prompt completes; each decoding
        request that got budget computes its tokens and keeps them all (its sampled token and
        every draft accepted).  How many finished."""
        finished = 0
        for req in self.sampled:
            req.in_flight = 0
        self.sampled = []
        for req, n, decoding in scheduled:
            req.computed += n
            outputs = req.outputs
            if decoding:
                req.outputs += n
                finished += req.outputs >= self.workload.osl
            elif req.computed >= req.num_tokens:  # its prompt (or its recomputation) is done
                # one token, and each placeholder draft of a padded full prefix-cache hit
                req.outputs += 1 + req.computed - req.num_tokens
                finished += req.outputs >= self.workload.osl
            if self.config.async_scheduling and req.outputs > outputs:
                req.in_flight = req.outputs - outputs
                self.sampled.append(req)
            # (async: a finished request holds its blocks until the next pass is scheduled)
            if self.pool is not None and req.outputs >= self.workload.osl and not self.config.async_scheduling:
                self.release(req)
        if not self.config.async_scheduling:
            self.running = [r for r in self.running if r.outputs < self.workload.osl]
        if finished and self.sent < self.workload.total_prompts:
            delay = 2 if self.config.async_scheduling else 1
            self.arrivals.append((self.tick + delay, finished))
        return finished

    def alike(self, scheduled: list, finished: int, scheduled_with: int) -> int:
        """How many coming steps repeat the step just advanced: each of its prefill requests takes
        the same tokens again without completing its prompt, each decoding request its tokens again
        without finishing, nobody left after it was scheduled (async; its slot freed), nobody finished and
        nobody arrives meanwhile (then the budget left and the admission come out the same too)."""
        if finished or len(self.running) != scheduled_with or not scheduled:
            return 0
        # (advanced already) a prompt chunk must leave a token for later, a decode its last output
        alike = min((self.workload.osl - 1 - req.outputs) // n if decoding
                    else (req.prompt_len - req.computed - 1) // n for req, n, decoding in scheduled)
        if self.arrivals:
            alike = min(alike, self.arrivals[0][0] - self.tick - 1)
        return max(alike, 0)

    def repeat(self, scheduled: list, rows: list, alike: int) -> Iterator[ScheduledStep]:
        """The ``alike`` steps after this one, yielded step by step but advanced at once (``rows``:
        the indexer's prefill rows of the step just advanced, their contexts already advanced)."""
        # requests in lock step take the same chunk: one request shape per run of them
        same: list[list] = []  # [context, tokens, how many in a row]
        for req, n in rows:
            if same and same[-1][0] == req.computed and same[-1][1] == n:
                same[-1][2] += 1
            else:
                same.append([req.computed, n, 1])
        rids, num_decode = tuple(r.rid for r, _ in rows), len(scheduled) - len(rows)
        for k in range(alike):
            batch = None
            if rows:
                requests = []
                for context, n, count in same:
                    requests += [self.request(context + k * n, n)] * count
                batch = StepBatch(tuple(requests), self.step)
            yield self.executed(batch, num_decode, rids)
        for req, n, decoding in scheduled:
            if decoding:
                req.outputs += alike * n
            req.computed += alike * n
            self.cached_prefix = max(self.cached_prefix, self.cacheable_prefix(req, 0))
        self.tick += alike


def _steps(engine: _Engine, repeat_alike: bool) -> Iterator[ScheduledStep]:
    repeat_alike = repeat_alike and engine.pool is None  # a finite KV cache: every step on its own
    while engine.busy():
        scheduled, scheduled_with = engine.schedule()
        rows = engine.rows(scheduled)
        if scheduled:
            batch = StepBatch(tuple(engine.request(r.computed, n) for r, n in rows), engine.step) \
                if rows else None
            yield engine.executed(batch, len(scheduled) - len(rows), tuple(r.rid for r, _ in rows))
        finished = engine.advance(scheduled)
        alike = engine.alike(scheduled, finished, scheduled_with) if repeat_alike else 0
        if alike:
            yield from engine.repeat(scheduled, rows, alike)
        engine.tick += 1


def simulate(workload: ClosedLoopWorkload, config: SchedulerConfig = SchedulerConfig()) -> Iterator[ScheduledStep]:
    """Simulate vLLM V1's scheduler, step by step, until every prompt is done.

    Per step (docs/design.md#the-scheduler-that-produces-the-batches): running requests first, in order, each takes
    min(remaining, budget left, threshold); a decoding request takes 1 token, or
    min(1 + drafts, budget left) with speculative decoding (every draft accepted).  A step's
    prefill batch holds its prompt chunks and the decodes with more new tokens than the
    release's indexer takes in its decode path (``SchedulerConfig.decode_threshold``).
    Then waiting requests are admitted while fewer than max_num_seqs run and
    budget is left; a prefix-cache hit becomes context, rounded down to whole
    blocks and never the whole prompt (the last token is always recomputed);
    blocks count as cached from the step that schedules them.
    The threshold caps each chunk except, on releases that lift it for a lone
    request (``threshold_lone_exempt``: vLLM 0.33.0), when only one request is
    running or waiting.  A finished request's replacement arrives before the next step
    (sync) or one step later (async).

    Async scheduling, as vLLM's engine runs it: step k+1 is scheduled before
    step k's output is processed, so a request that finished in step k is
    still running (it takes no tokens, but it counts towards max_num_seqs and
    towards "more than one request" for the threshold) while step k+1 is
    scheduled, and its replacement is first seen by step k+2.

    Steps are numbered as the engine executes them: a scheduling pass that
    schedules nothing (an idle engine, or one whose running requests all wait
    for outputs in flight) is neither yielded nor counted.  Checked step for
    step against vLLM's own scheduler (``indexer_lib.workload.vllm_scheduler``).

    A run of steps alike (the same requests take the same tokens; nobody completes a prompt or
    finishes, nothing arrives: long prompts chunked in lock step, or steady decoding) is yielded
    step by step but advanced at once; ``simulate_each_step`` advances every step on its own (the
    tests hold the two together).
    """
    return _steps(_Engine(workload, config), repeat_alike=True)


def simulate_each_step(workload: ClosedLoopWorkload,
                       config: SchedulerConfig = SchedulerConfig()) -> Iterator[ScheduledStep]:
    """``simulate``, advancing every step on its own: the plain reference of its shortcut."""
    return _steps(_Engine(workload, config), repeat_alike=False)


def least_steps(workload: ClosedLoopWorkload, config: SchedulerConfig) -> int:
    """The fewest engine steps the workload's schedule can take: its prompts' tokens past the
    shared prefix at max_num_batched_tokens a step, and no fewer than its output length (of one
    rank's share where the scheduler is one of several)."""
    workload = rank_workload(workload, config.dp)
    shortest = min([length_bounds(workload.isl, workload.random_range_ratio)[0]] + [n for _, n in workload.mix])
    prefill = workload.total_prompts * max(0, shortest - workload.shared_prefix)
    if workload.warm_cache and config.enable_prefix_caching:
        prefill = workload.total_prompts  # at least each prompt's last token
    return max(-(-prefill // config.max_num_batched_tokens), workload.osl)


def check_schedule_size(workload: ClosedLoopWorkload, config: SchedulerConfig) -> None:
    """BadValue before simulating a schedule of more than ``MAX_SCHEDULE_STEPS`` steps."""
    steps = least_steps(workload, config)
    if steps > MAX_SCHEDULE_STEPS:
        raise BadValue("concurrency", f"concurrency {workload.concurrency} x isl {workload.isl} x osl {workload.osl} at "
                                      f"max_num_batched_tokens {config.max_num_batched_tokens}: at least {steps:,} "
                                      f"engine steps, more than the {MAX_SCHEDULE_STEPS:,} one schedule is simulated for")
