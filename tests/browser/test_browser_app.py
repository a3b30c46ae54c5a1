"""The app as a person uses it: ``indexer-lab app`` started on a free port, its page opened in chromium
(driven by playwright); no code shows, the frontier dashboard's first figure and table are the
library's, a control moved redraws them, a bad value typed into a control is said in one line and
the last figure stays; the page asks nothing of any server but the app's own, and the browser
console stays clean."""
from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys
import time
from urllib.parse import urlparse

import psutil
import pytest

from labdriver import CHROMIUM, CHROMIUM_ARGS, REPO, free_port, isolated_env


class AppServer:
    """``python -m indexer_lib app --port <free>`` in its own process group, every per-user folder
    inside ``tmp`` (as the JupyterLab of the notebooks' tests)."""

    def __init__(self, tmp):
        self.env = isolated_env(tmp)
        self.port = free_port()
        self.log = tmp / "app.log"
        self.proc = None
        self.url = None

    def start(self, timeout: float = 120.0) -> "AppServer":
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "indexer_lib", "app", "--port", str(self.port)],
                                     cwd=REPO, env=self.env, stdout=self._log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"^indexer-lab app: (http://\S+) \(Ctrl-C stops it\)$", self.log.read_text(), re.M)
            if found:
                self.url = found.group(1)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"indexer-lab app exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.25)
        raise RuntimeError(f"indexer-lab app printed no address within {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def processes(self) -> list:
        root = psutil.Process(self.proc.pid)
        return [root] + root.children(recursive=True)

    def stop(self) -> list[str]:
        """SIGTERM to the command (as a service manager stops it); what is left running after it."""
        procs = self.processes()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            p.kill()
        self._log_file.close()
        return [" ".join(p.cmdline()[:4]) for p in alive]


@pytest.fixture(scope="module")
def app(browser_tools, tmp_path_factory):
    server = AppServer(tmp_path_factory.mktemp("app")).start()
    try:
        yield server
    finally:
        left = server.stop()
        assert left == [], f"still running after the app stopped: {left}"
        assert "interrupted: the server stopped" in server.log.read_text()


@pytest.fixture
def app_page(app):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=app.env, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1500, "height": 1000}).new_page()
            page.errors, page.elsewhere = [], []
            page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: page.errors.append(f"page error: {exc}"))
            page.on("request", lambda r: page.elsewhere.append(r.url)
                    if urlparse(r.url).scheme in ("http", "https", "ws", "wss")
                    and urlparse(r.url).netloc != urlparse(app.url).netloc else None)
            yield page
        finally:
            browser.close()


def frontier_of(page):
    """The frontier dashboard's output on the page: the cell output holding the budget slider."""
    return page.locator(".jp-OutputArea-output").filter(has=page.locator("label", has_text="budget (MiB)"))


def digest(image) -> str:
    return image.evaluate(
        """async img => {
            const data = await (await fetch(img.src)).arrayBuffer();
            const digest = await crypto.subtle.digest('SHA-256', data);
            return [...new Uint8Array(digest)].map(b => b.toString(16).padStart(2, '0')).join('');
        }""")


def cells(dash) -> list[str]:
    return [t.strip() for t in dash.locator(".widget-html-content:has(table) td").all_text_contents()]


def library_cells(dashboard) -> list[str]:
    return [html.unescape(c).strip() for c in re.findall(r"<td>(.*?)</td>", dashboard.html.value, re.S)]


def wait_until(page, what: str, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        page.wait_for_timeout(200)
    raise AssertionError(f"the page did not show {what} within {timeout:.0f} s")


def test_the_app_shows_the_dashboards_without_code(app_page, app, screenshot_dir):
    from indexer_lib.notebook import app as library

    start = time.perf_counter()
    page = app_page
    page.goto(app.url, timeout=180_000)
    dash = frontier_of(page)
    image = dash.locator("img.widget-image")
    image.wait_for(timeout=120_000)
    page.locator("img.widget-image").nth(1).wait_for(timeout=120_000)  # and auto's
    shown_s = time.perf_counter() - start
    assert page.locator(".jp-CodeCell").count() == 2  # the two dashboards
    assert page.locator(".jp-CodeCell .jp-InputArea, .cm-editor").count() == 0  # Voilà strips the code
    assert "app.frontier()" not in page.content() and "from indexer_lib" not in page.inner_text("body")

    # the first state is the library's (the same dashboard built in this process)
    here = library.frontier()
    first = library_cells(here)
    assert wait_until(page, "the first table", lambda: cells(dash) == first)
    auto = library.auto()
    assert page.locator("code", has_text=auto.recommendation.deploy_line).count() == 1
    shown0 = digest(image)

    # a control moved: a release before the logits budget; the table and the figure follow
    dash.locator(".widget-dropdown").filter(has=page.locator("label", has_text=re.compile("^engine$"))).locator(
        "select").select_option("vllm==0.18.1")
    here.controls["engine"].value = "vllm==0.18.1"
    moved = library_cells(here)
    assert moved != first and here.table["OOM points"].sum() > 0
    wait_until(page, "the moved table", lambda: cells(dash) == moved)
    shown1 = wait_until(page, "a new figure", lambda: (d := digest(image)) != shown0 and d)

    # bad values typed into the mix: one line says what is wrong, the last figure and table stay
    box = dash.locator(".widget-text", has=page.locator("label", has_text="mix")).locator("input")
    for bad, rule in (("0.1x", "expected SHARExLENGTH"), ("half", "expected SHARExLENGTH")):
        box.fill(bad)
        box.press("Enter")
        said = page.locator(".widget-html-content", has_text="cannot compute")
        said.first.wait_for(timeout=30_000)
        wait_until(page, f"the error naming {bad!r}", lambda: repr(bad) in said.first.inner_text())
        assert said.count() == 1, said.all_inner_texts()  # one line, not one per bad value
        text = said.inner_text()
        assert rule in text and "\n" not in text.strip(), text
        assert "Traceback" not in page.inner_text("body")
        assert digest(image) == shown1 and cells(dash) == moved  # the last figure kept
    page.screenshot(path=str(screenshot_dir / "app-bad-value.png"), full_page=True)

    # a good value again: the line goes, the figure follows
    box.fill("0.01x131072")
    box.press("Enter")
    wait_until(page, "the mix's status line", lambda: page.locator(
        ".widget-html-content", has_text="mix 0.01x131072").count() == 1)
    assert page.locator(".widget-html-content", has_text="cannot compute").count() == 0
    assert digest(image) != shown1

    assert page.errors == [], page.errors
    assert page.elsewhere == [], f"the page asked other servers: {page.elsewhere}"
    image.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / "app.png"), full_page=True)
    print(f"app: first page in {shown_s:.1f} s, then 4 changes; {time.perf_counter() - start:.1f} s in all")
