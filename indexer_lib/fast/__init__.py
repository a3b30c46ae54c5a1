"""Layer 6, shortcuts that make a frontier fast, behind one seam a reader can skip.

``plan`` and ``memory`` say what a chunk is and what it costs; this package answers the same
questions for the hundreds of thousands of steps of a grid without making every chunk record:

- ``presets``, ``planner``: a step planned into its chunk count and distinct chunk shapes by the
  strategies' own code (a request cut alone is cut once, wherever it appears);
- ``peak``: a plan's peak from those shapes, each shape's bytes (``memory.ChunkBytes``) counted
  once and kept;
- ``steps``: each distinct step's outcome at each budget, planned once per budget interval;
- ``step_table``: the steps that hold one request or two (nearly all of a long-context
  schedule's), evaluated together with numpy by the strategy's own code, and kept per budget for
  a grid's schedules;
- ``features``: a worst step's plan features and modelled time, each made once;
- ``caches``, ``records``, ``collector``: bounded caches, records made without their
  ``__init__``, and the cyclic collector kept off what the caches hold.

No rule of a release or a byte formula is written here: each shortcut runs ``plan``'s and
``memory``'s own code and keeps what it gives.  The tests hold them to the plain path
(``test_plan_shapes``, ``test_frontier_reference``, ``test_step_table``): the same chunks, peaks
and rows.
"""
from .caches import PerSettings
from .collector import young_only
from .features import step_features, step_time_ms
from .peak import SHAPE_TEMPORARIES, ShapesPeak, shapes_peak
from .planner import PlanShapes, ShapePlanner, StepShapes, plan_shapes
from .records import made_fast
from .shapes import ChunkShape, NeighbourShapeBuilder, ShapeBuilder
from .steps import StepOutcome, StepOutcomes, in_interval

__all__ = [
    "PerSettings", "young_only", "step_features", "step_time_ms", "SHAPE_TEMPORARIES", "ShapesPeak", "shapes_peak", "PlanShapes", "ShapePlanner",
    "StepShapes", "plan_shapes", "made_fast", "ChunkShape", "NeighbourShapeBuilder", "ShapeBuilder",
    "StepOutcome", "StepOutcomes", "in_interval",
]
