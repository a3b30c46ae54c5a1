"""The default-policy study's figure: per engine, each candidate default against the deployments
that OOM under it, the added time to first token (p90, with its band) and the KV cache its boot
lines take (``study.default_policy``; modelled)."""
from __future__ import annotations

import re

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from matplotlib.patches import Patch

from ..study.default_policy import winner
from . import style

PANELS = (("oom", "deployments\nthat OOM (count)"),
          ("added_ttft_p90_ms", "added TTFT p90\n(ms, mean)"),
          ("kv_lost_gib", "KV lost at boot\n(GiB per GPU, mean)"))
KIND_COLOURS = {"default": style.PALETTE[0], "wins": style.PALETTE[2], "other": style.PALETTE[6],
                "patched": style.PALETTE[1]}
KIND_NAMES = {"default": "the release's default", "wins": "wins (fewest OOMs, then time, then KV)",
              "other": "another shippable default", "patched": "patched engine (no release's setting)"}


def short_policy(name: str) -> str:
    """A policy's name as a tick label: TensorRT-LLM's elements and SGLang's 'free-memory' left out."""
    name = re.sub(r" \([\d,]+ elements\)", "", name).replace("free-memory fraction", "fraction")
    return name.replace(" (default)", " *")


def _colour(s: dict, best: dict | None) -> str:
    if best is not None and s["policy"] == best["policy"]:
        return KIND_COLOURS["wins"]
    if s["policy_kind"] == "default":
        return KIND_COLOURS["default"]
    return KIND_COLOURS["patched" if s["policy_kind"] == "patched" else "other"]


def default_policy_figure(summary: list[dict], scope: str) -> Figure:
    """Small multiples, one row per engine with a deployment: its policies against the three
    costs.  ``scope``: the models, GPUs and releases, for the title."""
    engines = [e for e in dict.fromkeys(s["engine"] for s in summary)
               if any(s["deployments"] for s in summary if s["engine"] == e)]
    per = {e: [s for s in summary if s["engine"] == e and s["deployments"]] for e in engines}
    height = 1.6 + sum(0.5 + 0.17 * len(p) for p in per.values())
    fig = style.figure(min(height, 11.0))
    axes = fig.subplots(max(1, len(engines)), len(PANELS), squeeze=False)
    for row, engine in enumerate(engines):
        policies = per[engine]
        best, _ = winner(summary, engine)
        labels = [short_policy(s["policy"]) for s in policies]
        colours = [_colour(s, best) for s in policies]
        for col, (key, label) in enumerate(PANELS):
            ax = axes[row][col]
            values = [s[key] if s[key] is not None else 0.0 for s in policies]
            err = None
            if key == "added_ttft_p90_ms":
                err = [[max(0.0, v - (s["added_ttft_p90_low_ms"] or v)) for v, s in zip(values, policies)],
                       [max(0.0, (s["added_ttft_p90_high_ms"] or v) - v) for v, s in zip(values, policies)]]
            bars = ax.barh(range(len(values)), values, color=colours, xerr=err, error_kw={"lw": 0.8})
            ax.set_yticks(range(len(values)), labels if col == 0 else [""] * len(values))
            ax.invert_yaxis()
            if key == "kv_lost_gib":
                ax.set_xlim(0, max(values) * 1.05 if max(values) > 0 else 1.0)  # boot lines may take nothing
            if key == "oom":  # out of the panel title's deployments; each bar's count written beside it
                ax.bar_label(bars, fmt="%d", padding=2, fontsize=style.FONT - 2)
                ax.set_xlim(0, max(max(values), 1) * 1.3)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
            if col == 0:
                ax.set_title(f"{engine} ({policies[0]['of_deployments']} deployments)", loc="left")
            if row == len(engines) - 1:
                ax.set_xlabel(label)
    handles = [Patch(color=c, label=KIND_NAMES[k]) for k, c in KIND_COLOURS.items()]
    style.legend_below(fig, handles, [h.get_label() for h in handles], ncol=2)
    style.title(fig, "What should an engine ship by default? Each candidate's OOMs, added TTFT p90 (band: the "
                     "published kernel checks) and KV cache lost at boot; * the release's default", scope + "; modelled")
    return fig
