"""``indexer-lab app``: the dashboards as a web app, ``notebooks/app.ipynb`` served by Voilà with no code
shown, listening on 127.0.0.1 unless ``--host`` says otherwise.  It prints the address once the server
answers and runs until Ctrl-C; the server's kernel imports this same indexer_lib."""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import exits
from .common import UsageError
from .exits import epilog

REPO = Path(__file__).resolve().parents[2]
APP_NOTEBOOK = REPO / "notebooks" / "app.ipynb"
PAGE = REPO / "notebooks" / "app_page"  # the page's template (a Jupyter data folder): nothing from a CDN
TEMPLATE = "indexer-lab"
DEFAULT_HOST = "127.0.0.1"  # this machine only
DEFAULT_PORT = 8866  # Voilà's own
START_S = 120.0  # how long the server may take to listen


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port}: a port is a whole number from 1 to 65535")
    return port


def register(subparsers) -> None:
    what = "the dashboards as a web app in the browser: no code shown, every number modelled (Voilà)"
    p = subparsers.add_parser("app", help=what, description=what + ". Runs until Ctrl-C.", epilog=epilog(
        "the server ran until it was stopped"))
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"the port to listen on (default {DEFAULT_PORT}); taken: refused, no other is tried")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"the address to listen on (default {DEFAULT_HOST}: this machine only); 0.0.0.0 "
                        "opens the app, with no password, to every machine that can reach this one")
    p.set_defaults(func=cmd_app)


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def check_address(host: str, port: int) -> str:
    """The address to reach the server at once it listens; UsageError where ``host`` is not an
    address of this machine or the port is taken there."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError):
        raise UsageError(f"--host {host!r}: not an address of this machine; e.g. 127.0.0.1 (this machine "
                         "only) or 0.0.0.0 (every interface)") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind(address)
        except OSError as e:
            raise UsageError(f"--host {host} --port {port}: cannot listen there ({e.strerror}); "
                             "another --port, or an address of this machine") from None
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address[0], address[0])


def voila_command(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "voila", str(APP_NOTEBOOK), "--no-browser", f"--port={port}",
            f"--Voila.ip={host}", "--Voila.port_retries=0", f"--template={TEMPLATE}"]


def cmd_app(args) -> int:
    if importlib.util.find_spec("voila") is None:
        print('indexer-lab app: failed: needs Voilà, not installed here (pip install -e ".[notebooks]")',
              file=sys.stderr)
        return exits.FAILED
    reach = check_address(args.host, args.port)
    env = dict(os.environ)
    for name, first in (("PYTHONPATH", REPO), ("JUPYTER_PATH", PAGE)):  # this indexer_lib; the page's template
        env[name] = os.pathsep.join(p for p in (str(first), env.get(name)) if p)
    server = subprocess.Popen(voila_command(args.host, args.port), env=env)
    stop = signal.signal(signal.SIGTERM, interrupt)  # a SIGTERM stops the server as Ctrl-C does
    try:
        if not wait_listening(server, reach, args.port):
            print(f"indexer-lab app: failed: the Voilà server exited with status {server.returncode} "
                  "(its log above)", file=sys.stderr)
            return exits.FAILED
        print(f"indexer-lab app: {url_of(args.host, args.port)} (Ctrl-C stops it)", flush=True)
        server.wait()
        return exits.DONE if server.returncode == 0 else exits.FAILED
    except KeyboardInterrupt:
        raise KeyboardInterrupt("the server stopped") from None
    finally:
        signal.signal(signal.SIGTERM, stop)
        end(server)


def interrupt(signum, frame):
    raise KeyboardInterrupt


def wait_listening(server: subprocess.Popen, host: str, port: int) -> bool:
    """Whether the server listens (True) or has exited (False)."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.2)
    raise OSError(f"the Voilà server did not listen on port {port} within {START_S:.0f} s")


def end(server: subprocess.Popen) -> None:
    """Stop the server (it shuts its kernels down on SIGTERM)."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
