"""Helpers of the browser suite: a throw-away JupyterLab server and a page driving it.

Everything JupyterLab, IPython, matplotlib and chromium write goes under one
temporary folder (config, data, runtime, settings, workspaces, HOME, XDG, TMPDIR).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("INDEXER_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(tmp: Path) -> dict:
    """The environment of the server, its kernels and the browser: every per-user
    folder inside ``tmp``."""
    dirs = {"JUPYTER_CONFIG_DIR": "jupyter/config", "JUPYTER_DATA_DIR": "jupyter/data",
            "JUPYTER_RUNTIME_DIR": "jupyter/runtime", "IPYTHONDIR": "ipython",
            "JUPYTERLAB_SETTINGS_DIR": "jupyter/lab-settings",
            "JUPYTERLAB_WORKSPACES_DIR": "jupyter/lab-workspaces", "HOME": "home",
            "XDG_CONFIG_HOME": "home/.config", "XDG_DATA_HOME": "home/.local/share",
            "XDG_CACHE_HOME": "home/.cache", "XDG_RUNTIME_DIR": "xdg-runtime",
            "MPLCONFIGDIR": "mpl", "TMPDIR": "tmp"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
    for name, rel in dirs.items():
        path = tmp / rel
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    (tmp / "xdg-runtime").chmod(0o700)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def lab_settings(settings_dir: Path) -> None:
    """User settings: no news or update checks (they would reach for the internet);
    every cell of a notebook kept in the page (no windowing), so all can be read;
    no autosave, so that a test's File > Save is the only save in flight."""
    for plugin, values in {
            "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
            "notebook-extension/tracker": {"windowingMode": "none"},
            "docmanager-extension/plugin": {"autosave": False}}.items():
        target = settings_dir / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))


class LabServer:
    """``jupyter lab`` on 127.0.0.1:<free port>, root folder ``tmp/root``, known token."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = tmp / "root"
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = isolated_env(tmp)
        lab_settings(Path(self.env["JUPYTERLAB_SETTINGS_DIR"]))
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "jupyterlab.log"
        self.proc = None

    def start(self, timeout: float = 90.0) -> "LabServer":
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
               "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.root}",
               f"--IdentityProvider.token={self.token}",
               "--ServerApp.open_browser=False", "--LabApp.news_url=",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly"]
        if os.geteuid() == 0:  # CI containers run as root
            cmd.append("--allow-root")
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=self.env, stdout=self._log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n"
                                   f"{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}",
                                            timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f} s:\n"
                           f"{self.log.read_text()[-3000:]}")

    def confinement_problems(self) -> list[str]:
        """What the server and its kernels would write outside ``tmp``: every per-user
        folder in their environment must be inside it, and the kernels' connection
        files must be in its runtime folder."""
        import psutil

        server = psutil.Process(self.proc.pid)
        procs = [server] + server.children(recursive=True)
        problems = []
        for p in procs:
            try:
                env = p.environ()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            for name in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR",
                         "IPYTHONDIR", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
                         "XDG_DATA_HOME", "TMPDIR"):
                if not Path(env.get(name, "/")).is_relative_to(self.tmp):
                    problems.append(f"pid {p.pid} ({p.name()}): {name}={env.get(name)}")
        kernels = [p for p in procs if "ipykernel" in " ".join(p.cmdline())]
        runtime = self.tmp / "jupyter" / "runtime"
        for k in kernels:
            files = [a for a in k.cmdline() if a.endswith(".json")]
            if not files or not all(Path(f).is_relative_to(runtime) for f in files):
                problems.append(f"kernel {k.pid}: connection file {files} not in {runtime}")
        return problems

    def shutdown_kernels(self) -> None:
        with urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}", timeout=10) as r:
            kernels = json.loads(r.read())
        for k in kernels:
            req = urllib.request.Request(f"{self.url}/api/kernels/{k['id']}?token={self.token}",
                                         method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server and the kernels it started
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log_file.close()
        self.proc = None


class LabPage:
    """One notebook open in JupyterLab in a chromium page; records console errors."""

    def __init__(self, page, server: LabServer):
        self.page, self.server = page, server
        self.console_errors: list[str] = []
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.console_errors.append(f"page error: {exc}"))

    def _on_console(self, msg) -> None:
        if msg.type == "error":
            self.console_errors.append(f"console.error: {msg.text} ({msg.location})")

    # -- opening and running -------------------------------------------------------
    def open(self, notebook: str, timeout_ms: int = 60_000) -> None:
        s = self.server
        self.page.goto(f"{s.url}/lab/tree/{notebook}?token={s.token}&reset",
                       timeout=timeout_ms)
        self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").wait_for(
            timeout=timeout_ms)
        self.wait_idle(timeout_ms)

    def indicator(self):
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) "
                                 ".jp-Notebook-ExecutionIndicator")

    def wait_idle(self, timeout_ms: int = 60_000) -> None:
        """The kernel is connected and idle, and stays idle for a moment."""
        deadline = time.monotonic() + timeout_ms / 1000
        quiet_since = None
        status = None
        while time.monotonic() < deadline:
            # the status bar names the kernel once one is connected ("No Kernel" before)
            status = [t for t in self.page.locator(".jp-StatusBar-TextItem").all_inner_texts()
                      if "|" in t]
            indicator = self.indicator().first.get_attribute("data-status", timeout=timeout_ms)
            running = self.page.locator(".jp-InputPrompt", has_text="[*]").count()
            if (status and not status[0].startswith("No Kernel") and
                    status[0].endswith("| Idle") and indicator == "idle" and running == 0):
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 0.6:
                    return
            else:
                quiet_since = None
            self.page.wait_for_timeout(100)
        raise AssertionError(f"the kernel did not become idle within {timeout_ms / 1000:.0f} s "
                             f"(status {status!r})")

    def menu(self, top: str, item: str) -> None:
        """Click a main-menu entry, as a person does."""
        self.page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(
            rf"^{re.escape(top)}$")).click()
        self.page.locator(".lm-Menu-content .lm-Menu-itemLabel", has_text=re.compile(
            rf"^{re.escape(item)}$")).click()

    def run_all(self, timeout_ms: int = 120_000) -> None:
        self.menu("Run", "Run All Cells")
        # the run has started once some prompt shows [*] or the kernel is busy
        self.page.wait_for_function(
            """() => [...document.querySelectorAll('.jp-InputPrompt')]
                      .some(p => /\\[[*0-9]+\\]/.test(p.textContent))""", timeout=timeout_ms)
        self.wait_idle(timeout_ms)

    def unsaved_tabs(self) -> int:
        """Open documents with unsaved changes (JupyterLab marks their tabs dirty until
        the server has confirmed the save)."""
        return self.page.locator("#jp-main-dock-panel .lm-TabBar-tab.jp-mod-dirty").count()

    def save_and_read(self, notebook: str, timeout: float = 90.0) -> dict:
        """File > Save Notebook, then the notebook as saved on disk once the save is
        confirmed and every code cell there has run (saved again if it was not).

        The file is read from the server's root folder, never through the contents
        API: a GET that lands while the save is still writing finds a half-written
        notebook, and jupyter_server then moves it aside to restore its backup copy,
        which fails the save in flight ("No such file or directory")."""
        path = self.server.root / notebook
        self.menu("File", "Save Notebook")
        start = time.monotonic()
        resaved = False
        while True:
            nb = None
            if self.unsaved_tabs() == 0:
                try:
                    nb = json.loads(path.read_text())
                except (OSError, ValueError):  # caught mid-write: read again
                    nb = None
            if nb is not None and all(c["execution_count"] for c in nb["cells"]
                                      if c["cell_type"] == "code"):
                return nb
            dialogs = self.page.locator(".jp-Dialog").all_text_contents()
            if dialogs or time.monotonic() - start > timeout:
                raise AssertionError(f"{notebook}: the saved notebook lacks executed cells "
                                     f"(unsaved tabs: {self.unsaved_tabs()}; "
                                     f"dialogs on the page: {dialogs})")
            if not resaved and nb is not None and time.monotonic() - start > timeout / 3:
                self.menu("File", "Save Notebook")
                resaved = True
            time.sleep(0.25)

    # -- reading -------------------------------------------------------------------
    def prompts(self) -> list[str]:
        return [t.strip() for t in self.page.locator(
            ".jp-Cell.jp-CodeCell .jp-InputArea-prompt").all_text_contents()]

    def stderr_outputs(self) -> list[str]:
        """Error and stderr outputs as the page shows them (tracebacks render as stderr)."""
        return self.page.locator(
            '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
        ).all_text_contents()

    def image_digest(self, locator) -> str:
        """SHA-256 of the bytes the page's <img> shows (fetched from its blob/data URL)."""
        return locator.evaluate(
            """async img => {
                const data = await (await fetch(img.src)).arrayBuffer();
                const digest = await crypto.subtle.digest('SHA-256', data);
                return [...new Uint8Array(digest)].map(b => b.toString(16).padStart(2, '0')).join('');
            }""")

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path


def prepare_notebooks(root: Path, parameters: dict[str, dict]) -> None:
    """Copy the notebooks into ``root`` with their parameters injected as papermill does
    (an ``injected-parameters`` cell after the ``parameters`` cell); nothing else changes."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    for name, params in parameters.items():
        nb = parameterize_notebook(load_notebook_node(str(REPO / "notebooks" / f"{name}.ipynb")),
                                   params)
        for cell in nb.cells:  # a notebook as a person finds it: nothing run yet
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, root / f"{name}.ipynb")
