"""ipywidgets dashboards on the same functions as the sweeps and figures.

The callbacks are plain methods: set a control's ``value`` (as a browser does)
and the figure (a PNG in an ``Image`` widget) and the table (an ``HTML``
widget) are recomputed; ``dashboard.frame`` and ``dashboard.table`` hold the
data behind them, so tests need no browser.
"""
from __future__ import annotations

import html

import ipywidgets as w

from .live_candidates import LiveCandidates
from .live_heatmap import LiveHeatmap
from .headless import show_dashboard
from .plots import lengths_of, not_default_of
from ..engines import engine_names, get_engine
from ..fast import young_only
from ..plan import STRATEGIES
from ..presets import GPUS, MODELS
from ..sweep import rows as sweep
from ..sweep.axes import default_isl
from ..sweep.grid import NO_BUDGET_MB, Grid


class FrontierDashboard:
    """The OOM frontier over concurrency x ISL for one model, engine release, budget and
    strategy, with sliders for free memory and the scheduler settings (modelled).

    ``grid``: the axes (concurrency x ISL) and the settings that stay fixed (OSL, the
    long-prefill threshold, the DeepGEMM what-if, the workload source, the temporaries); its
    first model, engine, strategy, free memory, max_num_batched_tokens, shared prefix, prompt
    length range ratio and mix start the controls (its length seed stays fixed), and ``budget_mb``
    the budget's.  Where its ISL axis is the model's default (2,048 up to its max_model_len), the
    axis follows the model picked."""

    BUDGETS = (32, 64, 128, 256, 512, 1024, 2048, 4096)
    TOKENS = (2048, 4096, 8192, 16384, 32768)
    RATIOS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9)
    MIXES = ("0.01x131072", "0.05x65536", "0.1x32768")  # offered; any SHARExLENGTH text is taken

    def __init__(self, grid: Grid = Grid.of(strategy=("vllm",)), budget_mb: float = 512):
        self.grid = grid  # the grid of the figure shown, moved with the controls
        self.isl_given = None if grid.isl == default_isl(grid.model) else grid.isl
        self.concurrency, self.isl = grid.concurrency, self.isl_axis(grid.model)
        model, strategy, free_gib = grid.model, grid.strategy[0], grid.free_gib[0]
        max_num_batched_tokens = grid.schedulers(grid.engine[0])[0].max_num_batched_tokens
        shared_prefix = grid.shared_prefix[0]
        ratio, mix = grid.random_range_ratio[0], grid.mix[0]
        budgets = sorted(set(self.BUDGETS) | {budget_mb})
        tokens = sorted(set(self.TOKENS) | {max_num_batched_tokens})
        style = {"description_width": "initial"}
        self.controls = {
            "model": w.Dropdown(options=sorted(MODELS), value=model, description="model"),
            "engine": w.Dropdown(options=engine_names(), value=grid.engine[0], description="engine"),
            # the GPU moves each release's scheduler defaults and SGLang's budget cap; a release's
            # refusal of a GPU shows in the status line
            "gpu": w.Dropdown(options=sorted(GPUS), value=grid.gpu, description="GPU"),
            "free_gib": w.FloatSlider(value=free_gib, min=0.25, max=40.0, step=0.01,
                                      description="free GiB", style=style),
            "budget_mb": w.SelectionSlider(options=budgets, value=budget_mb,
                                           description="budget (MiB)", style=style),
            "strategy": w.Dropdown(options=list(STRATEGIES), value=strategy,
                                   description="strategy"),
            "max_num_batched_tokens": w.SelectionSlider(
                options=tokens, value=max_num_batched_tokens,
                description="max_num_batched_tokens", style=style),
            "shared_prefix": w.IntSlider(value=shared_prefix, min=0, max=max(self.isl),
                                         step=1024, description="shared prefix (tokens)",
                                         style=style),
            # vLLM bench's --random-range-ratio: prompt lengths drawn from ISL x [1 - R, 1 + R]
            "random_range_ratio": w.SelectionSlider(
                options=sorted(set(self.RATIOS) | {ratio}), value=ratio,
                description="ISL range ratio R", style=style),
            # a share of the prompts at another length ("0.01x131072"; empty: none), checked as the
            # grid checks it: bad text is said in the status line, the last figure kept
            "mix": w.Combobox(value=mix, options=list(dict.fromkeys([*self.MIXES, mix] if mix else self.MIXES)),
                              placeholder="none, or SHARExLENGTH", ensure_option=False,
                              continuous_update=False, description="mix", style=style),
        }
        self.image = w.Image(format="png")
        self.html = w.HTML()
        self.status = w.HTML()
        self.frame = self.table = None
        self.view = LiveHeatmap(self.concurrency, self.isl)  # the figure, redrawn in place
        self.planned = {}  # planned rows per setting other than free memory (compute)
        self.updates = 0  # how many times the outputs were recomputed
        for control in self.controls.values():
            control.observe(self.on_change, names="value")
        self.update()

    def state(self) -> dict:
        return {name: c.value for name, c in self.controls.items()}

    def isl_axis(self, model: str) -> tuple[int, ...]:
        return self.isl_given if self.isl_given is not None else default_isl(model)

    PLANNED = 16  # planned settings kept, so that moving back to one is instant

    def compute(self, state: dict):
        """Model-mode rows of the current settings.  The plans do not depend on free memory
        (except SGLang's own chunker's): a free-GiB move only re-reads the planned rows
        (``sweep.at_free_memory``), and the last settings planned are kept."""
        free = round(state["free_gib"], 4)
        # each control is a setting of the grid: a move makes again only the part that holds it
        grid = self.grid = self.grid.where(**{**state, "free_gib": free, "isl": self.isl})
        reads_budget = grid.budgets(state["engine"], state["strategy"]) != (NO_BUDGET_MB,)
        # a strategy that reads no budget has the same rows at every budget
        ignored = {"free_gib"} if reads_budget else {"free_gib", "budget_mb"}
        key = tuple((k, v) for k, v in sorted(state.items()) if k not in ignored)
        if grid.measures_budget(state["engine"], state["strategy"]):
            key += (("free_gib", free),)  # its budget moves with the free memory
        frame = self.planned.get(key)
        if frame is None:
            frame = sweep.to_frame(list(sweep.model_rows(grid)))
            self.planned[key] = frame
            while len(self.planned) > self.PLANNED:
                self.planned.pop(next(iter(self.planned)))
            return frame
        return frame if "free_gib" in dict(key) else sweep.at_free_memory(frame, free)

    def update(self) -> None:
        with young_only():  # the caches grow large: collections walk only what this change makes
            self._update()

    def _update(self) -> None:
        isl = self.isl_axis(self.controls["model"].value)
        if isl != self.isl:  # another model's max_model_len: the panel is laid out again
            self.isl, self.view = isl, LiveHeatmap(self.concurrency, isl)
            self._set_quietly(self.controls["shared_prefix"], "max", max(isl))  # no prefix past every ISL
        state = self.state()
        self.frame = self.compute(state)
        self.image.value = self.view.render(self.frame, state["strategy"], state["budget_mb"],
                                            round(state["free_gib"], 4), state["model"], state["engine"])
        self.table = self.summary(self.frame)
        self.html.value = self.table.to_html(index=False)
        self.updates += 1
        differs = not_default_of(self.frame)
        differs = f"scheduler not the release default: {differs}" if differs else ""
        left_out = len(self.concurrency) * len(self.isl) - self.frame[["concurrency", "isl"]].drop_duplicates().shape[0]
        left_out = (f"; {left_out} points left out (a prompt past max_model_len, or shorter than the shared prefix)"
                    if left_out > 0 else "")
        lengths = lengths_of(self.frame)  # names R and the mix where the prompts' lengths vary
        lengths = f"{html.escape(lengths)}, sent in the order drawn; " if lengths else ""
        self.status.value = (f"<i>modelled; each point the worst step of one two-wave closed loop; {lengths}"
                             f"{len(self.frame)} points; "
                             f"{int(self.frame['oom'].sum())} OOM; "
                             f"{differs or 'scheduler: the release defaults'}{left_out}</i>")

    def _set_quietly(self, control, name: str, value) -> None:
        """Set a control's trait (a slider's bound may move its value) without a nested update."""
        control.unobserve(self.on_change, names="value")
        try:
            setattr(control, name, value)
        finally:
            control.observe(self.on_change, names="value")

    def summary(self, frame):
        """Per concurrency: the largest ISL without OOM and the worst-step peak there."""
        import pandas as pd

        # plain loops over the columns: a few dozen rows, where pandas' groupby is a change's largest cost
        best: dict = {}  # concurrency -> (largest ISL without OOM, peak there GiB, OOM points)
        for conc, isl, oom, gib in zip(frame["concurrency"].tolist(), frame["isl"].tolist(),
                                       frame["oom"].astype(bool).tolist(), frame["peak_transient_gib"].tolist()):
            top, peak, ooms = best.get(conc, (None, float("nan"), 0))
            if oom:
                ooms += 1
            elif top is None or isl > top:  # the first row of the largest ISL, as idxmax takes it
                top, peak = isl, gib
            best[conc] = (top, peak, ooms)
        return pd.DataFrame([{"concurrency": conc, "largest ISL without OOM": int(top or 0),
                              "peak there (GiB)": round(float(peak), 3), "OOM points": ooms}
                             for conc, (top, peak, ooms) in sorted(best.items())])

    def on_change(self, change=None) -> None:
        try:
            self.update()
        except ValueError as e:  # an impossible combination or a bad mix: say so, keep the last figure
            self.status.value = f"<b>cannot compute:</b> {html.escape(str(e))}"

    @property
    def widget(self) -> w.Widget:
        c = self.controls
        left = w.VBox([c["model"], c["engine"], c["gpu"], c["strategy"], c["budget_mb"], c["free_gib"]])
        right = w.VBox([c["max_num_batched_tokens"], c["shared_prefix"], c["random_range_ratio"], c["mix"],
                        self.status])
        return w.VBox([w.HBox([left, right]), w.HBox([self.image, self.html])])

    def _ipython_display_(self):
        show_dashboard(self.widget, self.image.value, self.html.value, "The frontier dashboard")


class AutoDashboard:
    """auto's recommendation per deployment as free memory moves (modelled), on an engine
    release picked from ``engines`` (if given).

    Candidates are evaluated once per deployment and engine (``beyond.AutoDeployments``);
    moving the free-memory slider only re-filters them and redraws what that touches of the
    figure (``LiveCandidates``)."""

    def __init__(self, deployments=None, free_gib: float | None = None, engines=None, **auto_options):
        from .beyond import AutoDeployments

        self.auto = deployments if isinstance(deployments, AutoDeployments) else \
            AutoDeployments(deployments, **auto_options)
        self.by_engine = {self.auto.engine: self.auto}
        names = list(self.auto.deployments)
        first_free = self.auto.deployments[names[0]][1] if free_gib is None else free_gib
        style = {"description_width": "initial"}
        self.controls = {
            "deployment": w.Dropdown(options=names, value=names[0], description="deployment",
                                     style=style),
            "free_gib": w.FloatSlider(value=first_free, min=0.25, max=16.0, step=0.05,
                                      description="free GiB", style=style),
        }
        if engines:
            options = list(dict.fromkeys(get_engine(e).name for e in engines))
            if self.auto.engine is not None and self.auto.engine not in options:
                options.insert(0, self.auto.engine)
            self.controls["engine"] = w.Dropdown(options=options, value=self.auto.engine or options[0],
                                                 description="engine", style=style)
        self.image = w.Image(format="png")
        self.html = w.HTML()
        self.recommendation = None
        self.view = LiveCandidates()  # the figure, redrawn in place as free memory moves
        self.updates = 0
        for control in self.controls.values():
            control.observe(self.on_change, names="value")
        self.update()

    def update(self) -> None:
        if "engine" in self.controls:  # another release: evaluated once, then kept
            engine = self.controls["engine"].value
            if engine not in self.by_engine:
                self.by_engine[engine] = self.auto.on_engine(engine)
            self.auto = self.by_engine[engine]
        name, free = self.controls["deployment"].value, round(self.controls["free_gib"].value, 4)
        frame, rec = self.auto.candidates_frame(name, free)
        self.recommendation = rec
        on = f" on {self.auto.engine}" if self.auto.engine else ""
        self.image.value = self.view.render(frame, rec.free_bytes, f"\n({name}{on}, {free:g} GiB free)")
        lines = [f"<code>{html.escape(rec.deploy_line)}</code>"]
        if rec.deployable is not None:
            lines.append(f"margin to the OOM frontier: {rec.margin_bytes / 2**20:.0f} MiB; "
                         f"{rec.deployable.total_ms:.1f} ms over the mix")
        if rec.patched_line is not None:
            lines.append(html.escape(rec.patched_line))
        self.html.value = "<br>".join(lines) + f" <i>({rec.time_source})</i>"
        self.updates += 1

    def on_change(self, change=None) -> None:
        try:
            self.update()
        except ValueError as e:  # nothing fits: say so, keep the last figure
            self.recommendation = None
            self.html.value = f"<b>no recommendation:</b> {e}"

    @property
    def widget(self) -> w.Widget:
        return w.VBox([w.HBox(list(self.controls.values())), self.html, self.image])

    def _ipython_display_(self):
        show_dashboard(self.widget, self.image.value, self.html.value, "The auto dashboard")
