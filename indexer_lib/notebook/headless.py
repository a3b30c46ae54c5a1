"""Dashboards in an executed notebook: the live widget, or headless (``runmode.headless``) its
first figure and table with a note."""
from __future__ import annotations

from ..runmode import headless


def show_dashboard(widget, png: bytes | None, html: str | None, what: str) -> None:
    """Display a dashboard: the live widget, or headless its current figure and table."""
    from IPython.display import HTML, Image, Markdown, display

    if not headless():
        display(widget)
        return
    display(Markdown(f"*{what}: open this notebook in JupyterLab to move its controls; below, its "
                     "first state.*"))
    if png:
        display(Image(data=bytes(png), format="png"))
    if html:
        display(HTML(html))
