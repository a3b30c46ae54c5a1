"""Layer 12, what the notebooks show: every figure and widget is a function here.

- ``plots``: the figures (one question each, units on the axes, modelled vs measured);
- ``widgets``: the ipywidgets dashboards (frontier, auto);
- ``tables``: pasteable Markdown and CSV tables;
- ``params``: the notebooks' parameters, checked before any work;
- ``beyond``: what notebook 04 computes (the strategies beyond the field).
"""
