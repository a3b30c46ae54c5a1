"""ipywidgets dashboards on the same functions as the sweeps and figures.

The callbacks are plain methods: set a control's ``value`` (as a browser does)
and the figure (a PNG in an ``Image`` widget) and the table (an ``HTML``
widget) are recomputed; ``dashboard.frame`` and ``dashboard.table`` hold the
data behind them, so tests need no browser.
"""
from __future__ import annotations

import asyncio
import html

import ipywidgets as w

from .live_candidates import LiveCandidates
from .live_heatmap import Kept, LiveHeatmap
from .headless import show_dashboard
from ..runmode import headless
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
    axis follows the model picked.

    What a state shows (rows, figure, table, status line) is made once and kept; in a kernel,
    what the budget slider's other notches show is made while the kernel waits
    (``plan_budget_axis``), so that dragging the budget only looks it up."""

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
        self.shown = Kept(self.SHOWN)  # what each state shows (prepare)
        self.axis_round = 0  # changes of the settings so far: budgets planned ahead for older ones are not
        self.axis_settings = self.axis_rows = None  # the settings of the last round (but the budget), its rows'
        self.updates = 0  # how many times the outputs were recomputed
        for control in self.controls.values():
            control.observe(self.on_change, names="value")
        self.update()

    def state(self) -> dict:
        return {name: c.value for name, c in self.controls.items()}

    def isl_axis(self, model: str) -> tuple[int, ...]:
        return self.isl_given if self.isl_given is not None else default_isl(model)

    SHOWN = 32  # states whose figure, table and status line are kept
    PLANNED = 64  # planned settings kept (a few settings' whole budget axes), so moving back is instant
    # idle this long after a change of the settings, what the other budgets show is made; None: never
    AXIS_IDLE_S: float | None = 1.5
    AXIS_DELAY_S = 0.001  # between two parts made ahead: a control's message goes first

    def compute(self, state: dict):
        """Model-mode rows of the current settings.  The plans do not depend on free memory
        (except SGLang's own chunker's): a free-GiB move only re-reads the planned rows
        (``sweep.at_free_memory``), and the last settings planned are kept."""
        free = round(state["free_gib"], 4)
        grid = self.grid_at(state)
        key = self.planned_key(grid, state)
        frame = self.planned.get(key)
        if frame is None:
            frame = self._keep_planned(key, sweep.to_frame(list(sweep.model_rows(grid))))
        self.grid = grid
        return frame if "free_gib" in dict(key) else sweep.at_free_memory(frame, free)

    def grid_at(self, state: dict) -> Grid:
        """The grid of ``state``: each control is a setting of the grid, so a move makes again only
        the part that holds it."""
        return self.grid.where(**{**state, "free_gib": round(state["free_gib"], 4), "isl": self.isl})

    def _keep_planned(self, key: tuple, frame):
        self.planned[key] = frame
        while len(self.planned) > self.PLANNED:
            self.planned.pop(next(iter(self.planned)))
        return frame

    def planned_key(self, grid: Grid, state: dict) -> tuple:
        """What the planned rows of ``state`` are kept under: every setting they depend on."""
        reads_budget = grid.budgets(state["engine"], state["strategy"]) != (NO_BUDGET_MB,)
        # a strategy that reads no budget has the same rows at every budget
        ignored = {"free_gib"} if reads_budget else {"free_gib", "budget_mb"}
        key = tuple((k, v) for k, v in sorted(state.items()) if k not in ignored)
        if grid.measures_budget(state["engine"], state["strategy"]):
            key += (("free_gib", round(state["free_gib"], 4)),)  # its budget moves with the free memory
        return key

    def budgets_to_plan(self, state: dict, figures: bool = True) -> list[float]:
        """The slider's budgets whose figure (or, without ``figures``, rows) is not made yet for the
        other settings of ``state``, the ones nearest the budget shown first (a drag moves one
        notch at a time)."""
        grid = self.grid
        if grid.budgets(state["engine"], state["strategy"]) == (NO_BUDGET_MB,):
            return []
        options = list(self.controls["budget_mb"].options)
        shown = options.index(state["budget_mb"])
        nearest = sorted(options, key=lambda b: (abs(options.index(b) - shown), -options.index(b)))
        if figures:
            return [b for b in nearest if self.shown_key({**state, "budget_mb": b}) not in self.shown]
        return [b for b in nearest if self.planned_key(grid, {**state, "budget_mb": b}) not in self.planned]

    def plan_budget_axis(self, state: dict, figures: bool = True, loop=None, round_: int | None = None) -> None:
        """Makes the rows of every budget of the slider for the other settings of ``state`` (and,
        with ``figures``, what each shows): the steps of one request and of two of all of them
        evaluated together in one pass, then each budget's rows, then its figure.  With ``loop``,
        one part a turn of that event loop (a few workloads' rows, or one figure), so that a
        control's message waits at most one part; a newer change of the settings (``round_``)
        stops it."""
        round_ = self.axis_round if round_ is None else round_
        todo = self.budgets_to_plan(state, figures) if round_ == self.axis_round else []
        if todo:
            self._next_part(self._axis_parts(state, todo, figures), loop, round_)

    ROWS_PER_PART = 8  # workloads whose rows one part makes

    def _axis_parts(self, state: dict, todo: list, figures: bool):
        """The parts of ``plan_budget_axis``, each done when the generator is resumed."""
        sweep.evaluate_steps(self.grid.where(budget_mb=tuple(float(b) for b in todo)))
        yield
        for budget in todo:
            at = {**state, "budget_mb": budget}
            key = self.planned_key(self.grid, at)
            if key not in self.planned:
                rows, tasks = [], set()
                for row in sweep.model_rows(self.grid_at(at)):
                    rows.append(row)
                    tasks.add(row["task"])
                    if len(tasks) == self.ROWS_PER_PART:
                        tasks.clear()
                        yield
                self._keep_planned(key, sweep.to_frame(rows))
                yield
            if figures and self.shown_key(at) not in self.shown:
                self.prepare(at)
                yield

    def _next_part(self, parts, loop, round_: int) -> None:
        while round_ == self.axis_round:
            shown = self.grid
            try:
                with young_only():
                    next(parts)
            except (StopIteration, ValueError):  # done, or settings the figure could not show either
                return
            finally:
                self.grid = shown
            if loop is not None:
                loop.call_later(self.AXIS_DELAY_S, self._next_part, parts, loop, round_)
                return

    def _plan_axis_while_idle(self, state: dict) -> None:
        """What the slider's other budgets show is made while the kernel waits for the next change
        (``plan_budget_axis`` on its event loop), so that a budget drag only looks it up: right
        after the first figure, and ``AXIS_IDLE_S`` after a change of the other settings (once a
        drag or a run of picks has ended).  A budget drag does not stop it; a free-memory move
        makes only rows not planned yet (none, once a round has ended: they do not depend on it),
        so typing free memory again and again costs nothing ahead.  Without a running event loop
        (a script, a test) or headless (an executed notebook) nothing is made ahead."""
        # the free memory as the figures read it (a browser may send 2.63 back as 2.6300000000000003)
        settings = tuple((k, v) for k, v in self.shown_key(state) if k != "budget_mb")
        if settings == self.axis_settings:  # a budget drag: the round of these settings goes on
            return
        rows = self.planned_key(self.grid, {**state, "budget_mb": None})  # what rows depend on
        figures = rows != self.axis_rows
        delay = self.AXIS_DELAY_S if self.axis_settings is None else self.AXIS_IDLE_S
        self.axis_settings, self.axis_rows = settings, rows
        self.axis_round += 1
        if self.AXIS_IDLE_S is None or headless():  # nothing made ahead (an executed notebook is read)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self.budgets_to_plan(state, figures):
            loop.call_later(delay, self.plan_budget_axis, state, figures, loop, self.axis_round)

    def update(self) -> None:
        with young_only():  # the caches grow large: collections walk only what this change makes
            self._update()

    def _update(self) -> None:
        isl = self.isl_axis(self.controls["model"].value)
        if isl != self.isl:  # another model's max_model_len: the panel is laid out again
            self.isl, self.view = isl, LiveHeatmap(self.concurrency, isl)
            self._set_quietly(self.controls["shared_prefix"], "max", max(isl))  # no prefix past every ISL
        state = self.state()
        self.frame, png, self.table, table_html, status = self.prepare(state)
        self.image.value = png
        self.html.value = table_html
        self.status.value = status
        self.updates += 1
        self._plan_axis_while_idle(state)

    def prepare(self, state: dict) -> tuple:
        """(rows, figure as PNG, summary table, its HTML, status line) of ``state``, made once and
        kept: moving back to settings shown or planned ahead before only looks them up."""
        key = self.shown_key(state)
        found = self.shown.recall(key)
        if found is None:
            frame = self.compute(state)
            png = self.view.render(frame, state["strategy"], state["budget_mb"], round(state["free_gib"], 4),
                                   state["model"], state["engine"])
            table = self.summary(frame)
            found = self.shown.keep(key, (frame, png, table, table.to_html(index=False), self.status_line(frame)))
        return found

    @staticmethod
    def shown_key(state: dict) -> tuple:
        return tuple(sorted({**state, "free_gib": round(state["free_gib"], 4)}.items()))

    def status_line(self, frame) -> str:
        """What the rows are, how many OOM, and what differs from the release's defaults."""
        differs = not_default_of(frame)
        differs = f"scheduler not the release default: {differs}" if differs else ""
        left_out = len(self.concurrency) * len(self.isl) - frame[["concurrency", "isl"]].drop_duplicates().shape[0]
        left_out = (f"; {left_out} points left out (a prompt past max_model_len, or shorter than the shared prefix)"
                    if left_out > 0 else "")
        lengths = lengths_of(frame)  # names R and the mix where the prompts' lengths vary
        lengths = f"{html.escape(lengths)}, sent in the order drawn; " if lengths else ""
        return (f"<i>modelled; each point the worst step of one two-wave closed loop; {lengths}"
                f"{len(frame)} points; "
                f"{int(frame['oom'].sum())} OOM; "
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
