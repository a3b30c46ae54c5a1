"""The dashboards' latency as a person sees it: control change to new image painted.

    .venv/bin/python scripts/bench_dashboard_browser.py [--moves 6] [--views live,redraw,plain,auto-live]

A throw-away JupyterLab (the browser suite's, ``tests/browser/labdriver.py``) runs a notebook
that shows ``FrontierDashboard`` on its default axis (GLM-5 on the latest vLLM, 8 concurrencies
x ISL to 202,752); Debian's chromium, driven by playwright, changes one control at a time as a
person does (a drop-down picked, a slider's handle moved one notch with the keyboard) and the
page records when the dashboard's ``<img>`` shows the new figure: its ``src`` replaced, the
image decoded and the next frame painted (``requestAnimationFrame``).  Each change's latency is
that moment minus the moment just before the change, both on the page's clock, so it holds
everything: the widget message to the kernel, planning, drawing, encoding, the message back
and the browser's decode and paint.

Views of the same figure, each measured in its own kernel:

- ``live``: the dashboard's own, ``notebook.live_heatmap.LiveHeatmap`` (laid out once, redrawn
  by region, the PNG of a figure shown before kept, PNG compressed by bands), with what the
  slider's other budgets show (rows and figure) made while the kernel is idle
  (``FrontierDashboard.plan_budget_axis``);
- ``live-now``: the same, with nothing made ahead (each budget planned and drawn when first shown);
- ``redraw``: the same figure laid out once, drawn whole on every change, Pillow's PNG at
  compression level 1 (no region, no kept PNG, no banded encoder);
- ``plain``: the ecosystem's way: a new figure for every change (``plots.frontier_heatmap``),
  Pillow's PNG at compression level 1 into the ``ipywidgets.Image``;
- notebook 04's widget (``AutoDashboard``: free memory and the deployment): ``auto-live``, its own
  ``notebook.live_candidates.LiveCandidates`` (what free memory touches redrawn over saved
  layers, PNG compressed by bands), ``auto-redraw`` (its figure kept, drawn whole, Pillow at
  level 1) and ``auto-plain`` (``plots.auto_candidates`` drawn afresh, Pillow at level 1).

A slider walks one notch at a time (back at its end), a drop-down goes through its options, a
typed value through a list; each move counts as cold (a value not shown before in that kernel:
planned and drawn afresh) or warm (shown before).  Printed per view and control: p50 and p95 in
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

# the views compared, as notebook cells run after the dashboard's; PILLOW first in each
PILLOW = '''
import io
from PIL import Image
from matplotlib.backends.backend_agg import FigureCanvasAgg

def pillow_png(canvas):
    """The canvas drawn whole, as Pillow's PNG at compression level 1."""
    canvas.draw()
    out = io.BytesIO()
    Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba()).save(
        out, format="png", compress_level=1)
    return out.getvalue()

def fresh_png(fig):
    """A new figure's PNG, at the dashboards' 90 dpi."""
    fig.set_dpi(90)
    return pillow_png(FigureCanvasAgg(fig))
'''

PLAIN_VIEW = '''
from indexer_lib.notebook import plots

class PlainView:
    """A new figure per change (plots.frontier_heatmap)."""

    def render(self, frame, strategy, budget_mb, free_gib, model, engine=None, mode="model"):
        return fresh_png(plots.frontier_heatmap(frame, by="strategy", budget_mb=budget_mb, free_gib=free_gib,
                                                model=model, engine=engine, mode=mode))

dash.view = PlainView()
dash.update()
'''

REDRAW_VIEW = '''
from indexer_lib.notebook.live_heatmap import Kept, LiveHeatmap

class _Whole:
    def show(self, key, draw):
        pass  # nothing drawn by region: the whole canvas is drawn below

class RedrawView(LiveHeatmap):
    """LiveHeatmap's figure, laid out once, drawn whole on every change."""

    def __init__(self, *args):
        super().__init__(*args)
        self.regions = {name: _Whole() for name in self.regions}
        self.pngs = Kept(0)  # no PNG kept per figure either

    def png(self):
        return pillow_png(self.canvas)

dash.view = RedrawView(dash.concurrency, dash.isl)
dash.update()
'''

SETUP = '''
from indexer_lib.notebook.widgets import FrontierDashboard
from indexer_lib.sweep.grid import Grid
dash = FrontierDashboard(Grid.of(strategy=("vllm",)), budget_mb=512)  # the default axis
'''

# what a person changes, in order: (control, kind, moves): a slider's handle one notch right or
# left with the keyboard, a value typed into a slider's readout, or a drop-down's options in turn
CONTROLS = [("budget (MiB)", "slider", "right"), ("strategy", "dropdown", ["causal", "per-request", "engine", "vllm"]),
            ("free GiB", "slider", "right"), ("free GiB", "typed", ["3.5", "8", "16", "2.63", "24", "1"]),
            ("max_num_batched_tokens", "slider", "left"),
            # one notch (1,024 tokens) of shared prefix may leave every worst step as it was
            ("shared prefix (tokens)", "typed", ["16384", "65536", "131072", "4096"]),
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


AUTO_SETUP = '''
from indexer_lib.notebook.widgets import AutoDashboard
dash = AutoDashboard()  # notebook 04's widget: auto's candidates per deployment
'''

AUTO_PLAIN_VIEW = '''
from indexer_lib.notebook import plots

class PlainCandidates:
    """A new figure per change (plots.auto_candidates)."""

    def render(self, frame, free_bytes, title_detail=""):
        return fresh_png(plots.auto_candidates(frame, free_bytes, title_detail))

dash.view = PlainCandidates()
dash.update()
'''

AUTO_REDRAW_VIEW = '''
from indexer_lib.notebook.live_candidates import LiveCandidates

class RedrawCandidates(LiveCandidates):
    """LiveCandidates' figure kept and its artists moved, drawn whole on every change (no layer, no
    kept PNG, no banded encoder)."""

    def render(self, frame, free_bytes, title_detail=""):
        key = tuple(frame[["strategy", "budget_mb", "total_ms", "peak_transient_bytes"]]
                    .itertuples(index=False, name=None))
        if key != self.key:
            self._draw_all(frame, free_bytes, title_detail)
            self.key = key
        else:
            self._move(frame, free_bytes, title_detail)
        return pillow_png(self.canvas)

dash.view = RedrawCandidates()
dash.update()
'''

AUTO_CONTROLS = [("free GiB", "slider", "right"),
                 ("deployment", "dropdown", ["long context: 8 x 64K + 64 x 10K", "RAG: 16 x 32K, 24K shared prefix",
                                             "chat: 64 x 10K prompts"])]

# per view: the notebook's cells and the controls moved
VIEWS = {"live": ([SETUP, "dash.widget"], CONTROLS),
         "live-now": ([SETUP.replace("dash = ", "FrontierDashboard.AXIS_IDLE_S = None\ndash = "), "dash.widget"],
                      CONTROLS),
         "redraw": ([SETUP, "dash.widget", PILLOW, REDRAW_VIEW], CONTROLS),
         "plain": ([SETUP, "dash.widget", PILLOW, PLAIN_VIEW], CONTROLS),
         "auto-live": ([AUTO_SETUP, "dash.widget"], AUTO_CONTROLS),
         "auto-redraw": ([AUTO_SETUP, "dash.widget", PILLOW, AUTO_REDRAW_VIEW], AUTO_CONTROLS),
         "auto-plain": ([AUTO_SETUP, "dash.widget", PILLOW, AUTO_PLAIN_VIEW], AUTO_CONTROLS)}


def notebook(view: str) -> dict:
    cells = VIEWS[view][0]
    return {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                       "source": c} for c in cells],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def control(page, label: str, kind: str):
    css = ".widget-dropdown" if kind == "dropdown" else ".widget-hslider"
    return page.locator(css).filter(has=page.locator("label.widget-label", has_text=label))


def change(page, label: str, kind: str, how, index: int) -> float:
    """Make one change; the page's clock just before it."""
    box = control(page, label, kind)
    if kind == "dropdown":
        value = how[index % len(how)]
        return box.locator("select").evaluate(
            """(sel, value) => { const t = performance.now(); sel.value = value;
                                 sel.dispatchEvent(new Event('change', {bubbles: true})); return t; }""", value)
    if kind == "typed":
        readout = box.locator(".widget-readout")
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(how[index % len(how)])
        t0 = page.evaluate("performance.now()")
        page.keyboard.press("Enter")
        return t0
    handle = box.locator(".noUi-handle")
    handle.focus()
    t0 = page.evaluate("performance.now()")
    handle.press("ArrowRight" if how == "right" else "ArrowLeft")
    return t0


def value_of(page, label: str, kind: str) -> str:
    box = control(page, label, kind)
    return box.locator("select").input_value() if kind == "dropdown" else box.locator(".widget-readout").inner_text()


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
        for label, kind, how in VIEWS[view][1]:
            cold, warm = [], []  # a value not shown before in this kernel, or one shown before
            seen = {value_of(page, label, kind)}
            direction = how
            for i in range(2 * moves):
                before = value_of(page, label, kind)
                t0 = change(page, label, kind, direction, i)
                after = value_of(page, label, kind)
                if after == before:  # a slider at its end: it walks back
                    direction = "left" if direction == "right" else "right"
                    t0 = change(page, label, kind, direction, i)
                    after = value_of(page, label, kind)
                latency = painted_after(page, t0) - t0
                (warm if after in seen else cold).append(latency)
                seen.add(after)
                lab.wait_idle()
            name = f"{label} (typed)" if kind == "typed" and label == "free GiB" else label
            results[name] = {"cold": cold, "warm": warm}
            print(f"  {view:8} {name:26} cold p50/p95 {pct(cold, 50):6.0f}/{pct(cold, 95):6.0f} ms "
                  f"({len(cold)}), warm {pct(warm, 50):6.0f}/{pct(warm, 95):6.0f} ms ({len(warm)})", flush=True)
        errors = lab.stderr_outputs() + lab.console_errors
        if errors:
            raise RuntimeError(f"{view}: errors on the page: {errors[:2]}")
        return results
    finally:
        lab.server.shutdown_kernels()
        context.close()


def pct(values, q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[q - 1] if q < 100 else ordered[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=8, help="moves per control and pass (cold, then warm)")
    parser.add_argument("--views", default=",".join(VIEWS), help=f"of {', '.join(VIEWS)}")
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
