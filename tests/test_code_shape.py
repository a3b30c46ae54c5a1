"""No function of indexer_lib takes more than 8 parameters (self and cls not counted; *args and
**kwargs one each) or runs longer than 80 lines, except those listed here with why."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "indexer_lib"
MAX_PARAMETERS = 8
MAX_LINES = 80

# module:function -> why it keeps more parameters
MORE_PARAMETERS = {
    "run/kernels/base.py:logits": "the kernel backends' interface: DeepGEMM's fp8_mqa_logits' own tensors "
                                  "(q, k, its scales, weights, ks, ke), the logits' width and layout",
    "run/kernels/deepgemm.py:logits": "the backends' interface, with the column range and padded rows it runs",
    "run/kernels/reference.py:logits": "the backends' interface, with the column range and padded rows it runs",
    "run/kernels/checks.py:check_mqa_logits_inputs": "checks the six tensors of fp8_mqa_logits' call",
}
LONGER = {}  # module:function -> why it is longer


def functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(PACKAGE)}:{node.name}", node


def parameters(node) -> int:
    a = node.args
    named = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    if named and named[0] in ("self", "cls"):
        named = named[1:]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_takes_more_than_8_parameters_but_the_listed():
    over = {name for name, node in functions() if parameters(node) > MAX_PARAMETERS}
    assert over - set(MORE_PARAMETERS) == set(), "split them or give them an object"
    assert set(MORE_PARAMETERS) - over == set(), "listed, but within the rule now: take them off the list"


def test_no_function_is_longer_than_80_lines_but_the_listed():
    over = {name for name, node in functions() if node.end_lineno - node.lineno + 1 > MAX_LINES}
    assert over - set(LONGER) == set(), "split them"
    assert set(LONGER) - over == set(), "listed, but within the rule now: take them off the list"
