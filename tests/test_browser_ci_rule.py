"""The browser suite never skips in CI: without chromium (or playwright) it fails
when CI=true, and skips with the reason elsewhere."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_browser_suite(tmp_path, ci: str | None):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["INDEXER_LAB_CHROMIUM"] = str(tmp_path / "no-such-chromium")
    env["INDEXER_LAB_SCREENSHOTS"] = str(tmp_path / "shots")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "base"), "tests/browser"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_without_chromium_ci_fails_instead_of_skipping(tmp_path, ci):
    proc = run_browser_suite(tmp_path, ci)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "failing instead of skipping" in proc.stdout
    assert "no-such-chromium" in proc.stdout and " skipped" not in proc.stdout


def test_without_chromium_elsewhere_it_skips_and_says_why(tmp_path):
    proc = run_browser_suite(tmp_path, None)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "skipped" in proc.stdout and "browser tests need chromium" in proc.stdout
