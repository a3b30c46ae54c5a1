"""Fixtures of the browser suite: chromium + playwright, one throw-away JupyterLab.

Without chromium or playwright the suite skips, except under CI (``CI=true``),
where it fails: CI installs both (scripts/install_browser.sh) and must run it.
The suite's run time is printed at the end of the session.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from labdriver import CHROMIUM, CHROMIUM_ARGS, REPO, LabServer

_timing = {"seconds": 0.0, "tests": 0}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_tools() -> list[str]:
    missing = []
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"chromium at {CHROMIUM} (apt-get install -y chromium)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("python playwright (pip install playwright)")
    return missing


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.browser)


def pytest_runtest_logreport(report):
    if "browser" in report.keywords:
        _timing["seconds"] += report.duration
        if report.when == "call":
            _timing["tests"] += 1


def pytest_terminal_summary(terminalreporter):
    if _timing["tests"]:
        terminalreporter.write_line(
            f"browser suite (JupyterLab + chromium): {_timing['tests']} tests in "
            f"{_timing['seconds']:.1f} s (set-up and teardown included)")


@pytest.fixture(scope="session")
def browser_tools():
    missing = missing_tools()
    if missing:
        message = "browser tests need " + " and ".join(missing)
        if in_ci():
            pytest.fail(message + " (CI=true: failing instead of skipping)", pytrace=False)
        pytest.skip(message)


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebooks",
                                                  REPO / "scripts" / "run_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOTEBOOKS = ("01_oom_frontier", "02_chunk_overhead", "03_strategies", "04_beyond")


@pytest.fixture(scope="session")
def notebook_parameters():
    """The CI parameters (notebooks/params/ci.yaml), checked by the headless runner's
    own code; the dashboard on; outputs inside the server's root."""
    runner = _runner()
    spec = runner.load_run(REPO / "notebooks" / "params" / "ci.yaml")
    params = {}
    for name in NOTEBOOKS:
        p = runner.notebook_parameters(spec, name, Path("results"))
        p["output_dir"] = "results"  # relative to the notebook: inside the server's root
        if name == "01_oom_frontier":
            p["dashboard"] = True
            # a 256-token long_prefill_token_threshold (vLLM's default is 0) builds the steps of
            # many partial prefills that OOM before the logits budget: the dashboard names it
            p["long_prefill_token_threshold"] = 256
        params[name] = p
    return params


@pytest.fixture(scope="module")
def lab(browser_tools, tmp_path_factory, notebook_parameters):
    from labdriver import prepare_notebooks

    server = LabServer(tmp_path_factory.mktemp("jupyterlab"))
    prepare_notebooks(server.root, notebook_parameters)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chromium(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                    env=lab.env, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def lab_page(chromium, lab):
    from labdriver import LabPage

    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    try:
        yield LabPage(context.new_page(), lab)
    finally:
        context.close()
        confined = lab.confinement_problems()  # server and kernels: every folder inside tmp
        lab.shutdown_kernels()  # each test's kernel goes with its page
        assert confined == [], confined


@pytest.fixture(scope="session")
def screenshot_dir():
    path = Path(os.environ.get("INDEXER_LAB_SCREENSHOTS", REPO / "results" / "browser-screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path
