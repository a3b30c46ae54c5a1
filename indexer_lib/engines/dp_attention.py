"""SGLang's DP attention: what one of its data-parallel ranks runs, which is what the indexer's
memory per GPU follows (docs/design.md#dp-attention).

A server started with ``--tp T --dp-size N --enable-dp-attention`` (``--attn-dp-size N`` from
0.5.22) runs N ranks of attention TP T / N, each with its own scheduler.  The release divides its
chunked_prefill_size by N for every rank, and a max_running_requests given on the command line
too; its default max_running_requests is sized per rank already.  Its dispatcher deals the
requests round robin (``workload.ranks``).  Every rank runs the whole indexer: its index heads are
replicated, not split by attention TP.  Each rule is the release's, with its sources, in the
profile's ``dp_attention`` fact (data/engines/).
"""
from __future__ import annotations

from ..checks import BadValue, check_int
from .profiles import EngineProfile, get_engine


def check_dp(engine: str | EngineProfile | None, tp: int, dp: int, derived_cache: bool = False) -> None:
    """BadValue (one line, naming the rule) unless ``dp`` ranks are a DP attention the release runs
    on ``tp`` GPUs and the project models: SGLang's, dp dividing tp, and a KV cache given in
    tokens (``derived_cache``: kv_cache_tokens "auto", whose weights per GPU assume plain TP)."""
    check_int("dp", dp, 1, 1024)
    if dp == 1:
        return
    profile = dp_release(engine, dp)
    if tp % dp:
        raise BadValue("dp", f"dp {dp} with tp {tp}: SGLang asserts tp_size % dp_size == 0, each rank "
                             f"having tp / dp GPUs ({profile.sources['file']}: dp_attention)")
    if derived_cache:
        raise BadValue("dp", f"dp {dp} with kv_cache_tokens auto: the derived cache splits the weights over "
                             "tp ranks, and DP attention keeps the attention weights on each rank's tp / dp "
                             "GPUs, which is not modelled; give the KV cache in tokens, as the engine logs it")


def dp_release(engine: str | EngineProfile | None, dp: int) -> EngineProfile:
    """The release's profile, or BadValue where it runs no DP attention that is modelled."""
    profile = get_engine(engine)
    if not profile.dp_attention:
        raise BadValue("dp", f"dp {dp}: DP attention is SGLang's (--dp-size N --enable-dp-attention): "
                             f"{profile.name} has none that is modelled")
    return profile


def rank_sizes(engine: str | EngineProfile | None, max_num_batched_tokens: int, max_num_seqs: int,
               seqs_given: bool, dp: int) -> dict:
    """One rank's chunked prefill and running requests: the server's divided by ``dp`` as the
    release does (its chunked_prefill_size always; max_running_requests where it was given, its
    default being per rank already); BadValue where a rank would get none."""
    if dp == 1:
        return {"max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs}
    dp_release(engine, dp)
    tokens, seqs = max_num_batched_tokens // dp, max_num_seqs // dp if seqs_given else max_num_seqs
    for name, server, rank in (("max_num_batched_tokens", max_num_batched_tokens, tokens),
                               ("max_num_seqs", max_num_seqs, seqs)):
        if rank < 1:
            raise BadValue(name, f"{name} {server} with dp {dp}: SGLang gives each rank {server} // {dp} = 0")
    return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs}


def dp_phrase(dp: int) -> str:
    """How a table or a title names a scheduler that is one rank of ``dp`` ('' for one rank)."""
    if dp == 1:
        return ""
    return (f"dp={dp} (default 1): SGLang's DP attention, one rank planned: chunked_prefill_size and a given "
            f"max_running_requests // {dp}, ceil(clients / {dp}) clients dealt round robin")

