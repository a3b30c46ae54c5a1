"""A notebook shows the figures as images: plots registers IPython's PNG form for
its pyplot-free figures (without it a cell shows ``<Figure size ...>``)."""
from matplotlib.figure import Figure


def test_figures_display_as_png_in_ipython():
    from IPython.core.interactiveshell import InteractiveShell

    from indexer_lib.notebook import plots

    shell = InteractiveShell.instance()
    png = shell.display_formatter.formatters["image/png"]
    fig = Figure()
    fig.add_subplot().plot([1, 2])
    png.pop(Figure, None)  # a kernel where nothing imported pyplot's inline backend
    assert "image/png" not in shell.display_formatter.format(fig)[0]
    assert plots.show_in_ipython(shell)
    data = shell.display_formatter.format(fig)[0]
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
