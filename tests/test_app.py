"""The app (``indexer-lab app``, ``notebooks/app.ipynb``) without a browser: the notebook runs in a
kernel as Voilà runs it and headless; the command refuses a bad port or host in one line before it
starts anything; the server it starts listens on 127.0.0.1 only, serves the dashboards with no code
and no link to another server, and stops with its kernel on SIGTERM (tests/browser/ drives the page)."""
from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from indexer_lib.cli import app as app_cli
from indexer_lib.cli import main
from indexer_lib.runmode import HEADLESS_ENV

REPO = Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.mark.parametrize("headless", [False, True], ids=["as-voila-runs-it", "headless"])
def test_the_app_notebook_runs_in_a_kernel(headless, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv(HEADLESS_ENV, "1" if headless else "0")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports this checkout, as the command's does
    nb = nbformat.read(app_cli.APP_NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(app_cli.APP_NOTEBOOK.parent)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.outputs]
    assert len(code) == 2 and all(c.execution_count for c in code)
    bad = [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"]
    assert bad == [], bad[:1]
    shown = [mime for o in outputs for mime in o.get("data", {})]
    if headless:  # each dashboard's first figure, as an executed notebook is read
        assert shown.count("image/png") == 2 and WIDGET not in shown
    else:
        assert shown.count(WIDGET) == 2


def one_line_refusal(capsys, *argv) -> str:
    code = main(["app", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    return err


def test_a_bad_port_or_host_is_refused_in_one_line(capsys, monkeypatch):
    started = []
    monkeypatch.setattr(app_cli.subprocess, "Popen", lambda *a, **k: started.append(a))
    for value in ("", "x", "0", "-1", "65536", "8866.5"):
        assert "--port" in one_line_refusal(capsys, "--port", value)
    assert "not an address of this machine" in one_line_refusal(capsys, "--host", "no such host.invalid")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = one_line_refusal(capsys, "--port", str(port))
    assert f"--port {port}: cannot listen there" in err
    assert started == []  # refused before any server starts


def test_without_voila_the_command_says_so(capsys, monkeypatch):
    monkeypatch.setattr(app_cli.importlib.util, "find_spec", lambda name: None)
    code = main(["app"])
    _, err = capsys.readouterr()
    assert code == 3 and err.count("\n") == 1 and "needs Voilà" in err and ".[notebooks]" in err


def test_the_command_listens_on_localhost_unless_told_otherwise():
    from indexer_lib.cli.main import build_parser

    parsed = build_parser().parse_args(["app"])
    assert (parsed.host, parsed.port) == ("127.0.0.1", 8866)
    cmd = app_cli.voila_command(parsed.host, parsed.port)
    assert "--Voila.ip=127.0.0.1" in cmd and "--Voila.port_retries=0" in cmd and "--no-browser" in cmd
    assert str(REPO / "notebooks" / "app.ipynb") in cmd


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(tmp: Path) -> dict:
    """This environment, with Jupyter's, IPython's and matplotlib's folders inside ``tmp``."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR",
                 "TMPDIR"):
        (tmp / name).mkdir()
        env[name] = str(tmp / name)
    env.pop("PYTHONPATH", None)  # the command puts its own indexer_lib on the kernel's path
    return env


def test_the_server_listens_on_localhost_serves_no_code_and_stops(tmp_path):
    import psutil

    port = free_port()
    log = tmp_path / "app.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "indexer_lib", "app", "--port", str(port)], cwd=REPO,
                                env=server_env(tmp_path), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while f"indexer-lab app: http://127.0.0.1:{port}/ (Ctrl-C stops it)" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.25)
        procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        listening = {c.laddr for p in procs for c in p.net_connections("inet")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        assert {a.ip for a in listening} == {"127.0.0.1"}, listening
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=120) as r:
            page = r.read().decode()
        outputs = re.findall(r'<script type="application/vnd.voila.cell-output\+json">\s*(.*?)\s*</script>',
                             page, re.S)
        assert sum(WIDGET in json.loads(o).get("data", {}) for o in outputs) == 2  # both dashboards
        assert "app.frontier()" not in page and "from indexer_lib" not in page  # no code
        assert not re.search(r'(href|src)="(https?:)?//', page), "the page links another server"
        kernels = [p for p in procs[0].children(recursive=True) if "ipykernel" in " ".join(p.cmdline())]
        assert kernels
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 130 and "indexer-lab app: interrupted: the server stopped" in log.read_text()
    _, alive = psutil.wait_procs(kernels, timeout=20)
    assert alive == []
