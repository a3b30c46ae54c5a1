"""The notebooks as a person uses them: opened in JupyterLab (chromium, driven by
playwright), run with Run > Run All Cells, the dashboard's controls moved with the
mouse and keyboard; the figure and the table must follow, and nothing may print
an error, in a cell or in the browser console."""
from __future__ import annotations

import hashlib
import html
import re
import time

import pytest

def cells_of_table(markup: str) -> list[str]:
    return [html.unescape(c).strip() for c in re.findall(r"<td>(.*?)</td>", markup, re.S)]


def assert_ran_cleanly(page, name: str) -> None:
    """Every code cell ran, no output is an error or stderr, the console is clean;
    checked on the page and in the notebook file JupyterLab saves."""
    prompts = page.prompts()
    assert prompts and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), prompts
    assert page.stderr_outputs() == [], f"{name}: error output in a cell"
    nb = page.save_and_read(f"{name}.ipynb")  # returns once every code cell there has run
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    bad = [o for c in code for o in c["outputs"]
           if o["output_type"] == "error" or o.get("name") == "stderr"]
    assert bad == [], f"{name}: {bad[:2]}"
    assert page.console_errors == [], page.console_errors


@pytest.mark.parametrize("name", ["02_chunk_overhead", "03_strategies", "04_beyond"])
def test_notebook_runs_all_cells_in_jupyterlab(lab_page, name, screenshot_dir):
    start = time.perf_counter()
    lab_page.open(f"{name}.ipynb")
    lab_page.run_all()
    seconds = time.perf_counter() - start
    assert_ran_cleanly(lab_page, name)
    figures = lab_page.page.locator(".jp-OutputArea-output img")
    assert figures.count() >= 1, "no figure shown"
    assert lab_page.page.locator(".jp-RenderedMarkdown table").count() >= 1, "no table shown"
    figures.last.scroll_into_view_if_needed()
    lab_page.screenshot(screenshot_dir / f"{name}.png")
    print(f"{name}: opened and run in the browser in {seconds:.1f} s")


class Dashboard:
    """The dashboard's controls and outputs on the page (ipywidgets 8 markup)."""

    def __init__(self, page):
        self.page = page
        self.image = page.locator("img.widget-image")
        self.table = page.locator(".widget-html-content:has(table)")

    def control(self, kind: str, label: str):
        return self.page.locator(f".{kind}").filter(
            has=self.page.locator("label.widget-label", has_text=re.compile(rf"^{re.escape(label)}$")))

    def choose(self, label: str, option: str) -> None:
        self.control("widget-dropdown", label).locator("select").select_option(option)

    def drag_selection_slider(self, label: str, options: list, value) -> None:
        """Drag the slider's handle with the mouse to ``value``'s notch."""
        slider = self.control("widget-hslider", label)
        track = slider.locator(".noUi-base").bounding_box()
        handle = slider.locator(".noUi-handle").bounding_box()
        x = track["x"] + track["width"] * options.index(value) / (len(options) - 1)
        y = handle["y"] + handle["height"] / 2
        mouse = self.page.mouse
        mouse.move(handle["x"] + handle["width"] / 2, y)
        mouse.down()
        mouse.move(x, y, steps=12)
        mouse.up()

    def type_readout(self, label: str, text: str) -> None:
        """Type a value into a slider's readout, as a person does for an exact value."""
        readout = self.control("widget-hslider", label).locator(".widget-readout")
        readout.click()
        self.page.keyboard.press("Control+A")
        self.page.keyboard.type(text)
        self.page.keyboard.press("Enter")

    def readout(self, label: str) -> str:
        return self.control("widget-hslider", label).locator(".widget-readout").inner_text()

    def cells(self) -> list[str]:
        return [t.strip() for t in self.table.locator("td").all_text_contents()]


def wait_for_outputs(lab_page, dash: Dashboard, expected_cells, expected_digest, before_digest,
                     timeout: float = 45.0):
    """Poll until the page shows the expected table and a new figure (then the kernel is idle)."""
    deadline = time.monotonic() + timeout
    cells = digest = None
    while time.monotonic() < deadline:
        cells = dash.cells()
        digest = lab_page.image_digest(dash.image)
        if cells == expected_cells and digest != before_digest and (
                expected_digest is None or digest == expected_digest):
            lab_page.wait_idle()
            return digest
        lab_page.page.wait_for_timeout(200)
    raise AssertionError(f"the dashboard did not follow its control: table {cells} "
                         f"(expected {expected_cells}); figure changed: {digest != before_digest}")


def test_frontier_dashboard_follows_its_controls(lab_page, notebook_parameters, screenshot_dir):
    from indexer_lib.notebook.params import check_values
    from indexer_lib.notebook.widgets import FrontierDashboard
    from indexer_lib.plan import BASELINE

    start = time.perf_counter()
    lab_page.open("01_oom_frontier.ipynb")
    lab_page.run_all()
    run_seconds = time.perf_counter() - start
    assert_ran_cleanly(lab_page, "01_oom_frontier")
    page = lab_page.page
    dash = Dashboard(page)
    dash.image.scroll_into_view_if_needed()
    assert dash.image.count() == 1 and dash.table.count() == 1

    # the same dashboard in this process: what the page must show after each move
    p = notebook_parameters["01_oom_frontier"]
    budgeted = [s for s in p["strategies"] if s != BASELINE]
    here = FrontierDashboard(check_values("01_oom_frontier", p).dashboard_grid(budgeted[0]),
                             budget_mb=512 if 512 in p["budget_mb"] else p["budget_mb"][0])

    def expected():
        return cells_of_table(here.html.value), hashlib.sha256(bytes(here.image.value)).hexdigest()

    cells0, digest0 = expected()
    assert dash.cells() == cells0, "the dashboard's first table differs from the library's"
    shown0 = lab_page.image_digest(dash.image)
    same_png = shown0 == digest0  # byte-equal PNGs when both processes render alike
    lab_page.screenshot(screenshot_dir / "01_oom_frontier-dashboard-before.png")

    # 1. the budget slider, dragged from 512 to 64 MiB
    options = list(here.controls["budget_mb"].options)
    dash.drag_selection_slider("budget (MiB)", options, 64)
    here.controls["budget_mb"].value = 64
    cells1, digest1 = expected()
    assert cells1 != cells0  # the peaks at the largest fitting ISL shrink with the budget
    shown1 = wait_for_outputs(lab_page, dash, cells1, digest1 if same_png else None, shown0)
    assert dash.readout("budget (MiB)") == "64"

    # 2. the engine dropdown: the latest vLLM (the default) -> a release from before the
    # logits budget, whose own chunker bounds only the workspace
    assert dash.control("widget-dropdown", "engine").locator("select").input_value() == "vllm==0.33.0"
    dash.choose("engine", "vllm==0.18.1")
    here.controls["engine"].value = "vllm==0.18.1"
    cells2, digest2 = expected()
    assert here.table["OOM points"].sum() > 0  # no budget: concurrency 64 x 10K OOMs
    shown2 = wait_for_outputs(lab_page, dash, cells2, digest2 if same_png else None, shown1)

    # 3. the strategy dropdown: no budget at all (the same plans on that release; its title)
    dash.choose("strategy", "n-only")
    here.controls["strategy"].value = "n-only"
    cells3, digest3 = expected()
    assert here.table["OOM points"].sum() > 0
    shown3 = wait_for_outputs(lab_page, dash, cells3, digest3 if same_png else None, shown2)

    # 4. free GiB typed in: 20 GiB holds every point (the CI lengths put 5% of the prompts at 64K)
    dash.type_readout("free GiB", "20")
    here.controls["free_gib"].value = 20.0
    cells4, digest4 = expected()
    assert here.table["OOM points"].sum() == 0
    shown4 = wait_for_outputs(lab_page, dash, cells4, digest4 if same_png else None, shown3)
    status = page.locator(".widget-html-content", has_text="modelled;").inner_text()
    assert "0 OOM" in status and "long_prefill_token_threshold=256 (default 0)" in status

    # 5. the mix typed in: bad text is said in the status line and the figure kept; then a mix
    box = dash.control("widget-text", "mix").locator("input")
    box.fill("0.1x")
    box.press("Enter")
    page.locator(".widget-html-content", has_text="cannot compute").wait_for(timeout=20_000)
    assert "expected SHARExLENGTH" in page.locator(".widget-html-content", has_text="cannot compute").inner_text()
    assert lab_page.image_digest(dash.image) == shown4  # the last figure kept
    box.fill("0.01x131072")
    box.press("Enter")
    here.controls["mix"].value = "0.01x131072"
    cells5, digest5 = expected()
    wait_for_outputs(lab_page, dash, cells5, digest5 if same_png else None, shown4)
    status = page.locator(".widget-html-content", has_text="modelled;").inner_text()
    assert "mix 0.01x131072" in status

    assert lab_page.stderr_outputs() == [] and lab_page.console_errors == [], (
        lab_page.stderr_outputs(), lab_page.console_errors)
    dash.image.scroll_into_view_if_needed()
    lab_page.screenshot(screenshot_dir / "01_oom_frontier.png")
    print(f"01_oom_frontier: run in the browser in {run_seconds:.1f} s, then 5 control moves "
          f"(figures byte-equal to the library's: {same_png}); "
          f"{time.perf_counter() - start:.1f} s in all")
