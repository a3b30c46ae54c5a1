"""The frontier dashboard's latency as a person sees it: control change to new image painted.

    .venv/bin/python scripts/bench_dashboard_browser.py [--moves 12] [--views regions,plain]

A throw-away JupyterLab (the browser suite's, ``tests/browser/labdriver.py``) runs a notebook
that shows ``FrontierDashboard`` on its default axis (GLM-5 on the latest vLLM, 8 concurrencies
x ISL to 202,752); Debian's chromium, driven by playwright, changes one control at a time as a
person does (a drop-down picked, a slider's handle moved one notch with the keyboard) and the
page records when the dashboard's ``<img>`` shows the new figure: its ``src`` replaced, the
image decoded and the next frame painted (``requestAnimationFrame``).  Each change's latency is
that moment minus the moment just before the change, both on the page's clock, so it holds
everything: the widget message to the kernel, planning, drawing, encoding, the message back
and the browser's decode and paint.

Two views draw the same figure, each measured in its own kernel:

- ``regions``: ``notebook.live_heatmap.LiveHeatmap``, the dashboard's own (laid out once,
  redrawn by region, PNG compressed by bands);
- ``plain``: the ecosystem's way: ``plots.frontier_heatmap`` draws a new figure for every
  change and Pillow writes its PNG at compression level 1 into the ``ipywidgets.Image``.

Every move goes to a value not seen before in that kernel (cold: planned and drawn afresh), then
the same moves again (warm: a value seen before).  Printed per view and control: p50 and p95 in
ms, cold and warm, and all moves together.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "browser"))

from labdriver import CHROMIUM, CHROMIUM_ARGS, LabPage, LabServer  # noqa: E402

PLAIN_VIEW = '''
import io
from PIL import Image
from matplotlib.backends.backend_agg import FigureCanvasAgg
from indexer_lib.notebook import plots

class PlainView:
    """A new figure per change (plots.frontier_heatmap), its PNG from Pillow at level 1."""

    def render(self, frame, strategy, budget_mb, free_gib, model, engine=None, mode="model"):
        fig = plots.frontier_heatmap(frame, by="strategy", budget_mb=budget_mb, free_gib=free_gib,
                                     model=model, engine=engine, mode=mode)
        fig.set_dpi(90)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        out = io.BytesIO()
        Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba()).save(
            out, format="png", compress_level=1)
        return out.getvalue()

dash.view = PlainView()
dash.update()
'''

SETUP = '''
from indexer_lib.notebook.widgets import FrontierDashboard
from indexer_lib.study.grid import Grid
dash = FrontierDashboard(Grid(strategy=("vllm",)), budget_mb=512)  # the default axis
'''

# what a person changes, in order: (control, kind, moves); a kind's move is one notch
CONTROLS = [("budget (MiB)", "slider", "right"), ("strategy", "dropdown", ["causal", "per-request", "engine", "vllm"]),
            ("free GiB", "slider", "right"), ("max_num_batched_tokens", "slider", "left"),
            ("shared prefix (tokens)", "slider", "right"),
            ("engine", "dropdown", ["vllm==0.19.1", "vllm==0.32.0", "sglang==0.5.23", "vllm==0.33.0"])]

WATCH = """() => {
  const img = document.querySelector('img.widget-image');
  window.__paints = [];
  new MutationObserver(() => {
    const changed = performance.now();
    img.decode().catch(() => null).then(() => requestAnimationFrame(
        () => window.__paints.push([changed, performance.now()])));
  }).observe(img, {attributes: true, attributeFilter: ['src']});
}"""


def notebook(view: str) -> dict:
    cells = [SETUP, "dash.widget"] + ([PLAIN_VIEW] if view == "plain" else [])
    return {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                       "source": c} for c in cells],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def control(page, label: str, kind: str):
    css = ".widget-hslider" if kind == "slider" else ".widget-dropdown"
    return page.locator(css).filter(has=page.locator("label.widget-label", has_text=label))


def change(page, label: str, kind: str, how, index: int) -> float:
    """Make one change; the page's clock just before it."""
    box = control(page, label, kind)
    if kind == "dropdown":
        value = how[index % len(how)]
        return box.locator("select").evaluate(
            """(sel, value) => { const t = performance.now(); sel.value = value;
                                 sel.dispatchEvent(new Event('change', {bubbles: true})); return t; }""", value)
    handle = box.locator(".noUi-handle")
    handle.focus()
    t0 = page.evaluate("performance.now()")
    handle.press("ArrowRight" if how == "right" else "ArrowLeft")
    return t0


def painted_after(page, t0: float, timeout_s: float = 60.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        paints = page.evaluate("window.__paints")
        later = [p for changed, p in paints if changed >= t0]
        if later:
            return min(later)
        page.wait_for_timeout(5)
    raise TimeoutError("the dashboard's image did not change")


def measure_view(browser, server, view: str, moves: int) -> dict:
    name = f"dash-{view}.ipynb"
    (server.root / name).write_text(json.dumps(notebook(view)))
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    lab = LabPage(context.new_page(), server)
    try:
        lab.open(name)
        lab.run_all(timeout_ms=300_000)
        page = lab.page
        page.locator("img.widget-image").wait_for()
        page.evaluate(WATCH)
        results = {}
        for label, kind, how in CONTROLS:
            cold, warm = [], []
            for phase, out in (("cold", cold), ("warm", warm)):
                for i in range(moves):
                    # a slider walks one way then back: the second pass revisits every value
                    direction = how if kind == "dropdown" else (
                        how if (i < moves // 2) == (phase == "cold") else ("left" if how == "right" else "right"))
                    t0 = change(page, label, kind, direction, i)
                    out.append(painted_after(page, t0) - t0)
                    lab.wait_idle()
            results[label] = {"cold": cold, "warm": warm}
            print(f"  {view:8} {label:26} cold p50/p95 {pct(cold, 50):6.0f}/{pct(cold, 95):6.0f} ms, "
                  f"warm {pct(warm, 50):6.0f}/{pct(warm, 95):6.0f} ms", flush=True)
        errors = lab.stderr_outputs() + lab.console_errors
        if errors:
            raise RuntimeError(f"{view}: errors on the page: {errors[:2]}")
        return results
    finally:
        lab.server.shutdown_kernels()
        context.close()


def pct(values, q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[q - 1] if q < 100 else ordered[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=8, help="moves per control and pass (cold, then warm)")
    parser.add_argument("--views", default="regions,plain")
    parser.add_argument("--json", type=Path, help="write every latency (ms) here")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        server = LabServer(Path(tmp))
        server.start()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=server.env,
                                            headless=True)
                try:
                    results = {}
                    for view in args.views.split(","):
                        results[view] = measure_view(browser, server, view, args.moves)
                finally:
                    browser.close()
        finally:
            server.stop()
    print("\nall moves, p50/p95 ms (control change to new image painted, chromium):")
    for view, per in results.items():
        every = [v for r in per.values() for v in r["cold"] + r["warm"]]
        cold = [v for r in per.values() for v in r["cold"]]
        print(f"  {view:8} all {pct(every, 50):.0f}/{pct(every, 95):.0f}, cold {pct(cold, 50):.0f}/{pct(cold, 95):.0f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
