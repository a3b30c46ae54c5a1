"""The few operations the rules are written with, on numbers or on numpy arrays of them.

Each rule of a release (a path's chunks, a byte formula) is written once and evaluated for one
step, with Python ints, or for arrays of steps at once, with numpy arrays of the same lengths.
Arithmetic and comparisons already work on both; a choice, a maximum and a minimum are these
functions, which take the plain Python way for plain numbers (fast, and the results stay ints)
and numpy's for arrays.  A mask is a bool or a bool array: ``&`` and ``|`` work on both, and
``not_`` negates either.
"""
from __future__ import annotations

import numpy as np


def is_array(x) -> bool:
    return type(x) is np.ndarray


def where(condition, a, b):
    """``a`` where ``condition`` holds, else ``b``."""
    if type(condition) is np.ndarray:
        return np.where(condition, a, b)
    return a if condition else b


def maximum(a, b):
    if type(a) is np.ndarray or type(b) is np.ndarray:
        return np.maximum(a, b)
    return a if a >= b else b


def minimum(a, b):
    if type(a) is np.ndarray or type(b) is np.ndarray:
        return np.minimum(a, b)
    return a if a <= b else b


def not_(mask):
    """The negation of a bool or a bool array (``~`` on a Python bool is an int)."""
    return mask ^ True


def any_of(mask) -> bool:
    """Whether the mask holds anywhere."""
    return bool(mask.any()) if type(mask) is np.ndarray else bool(mask)


def all_of(mask) -> bool:
    """Whether the mask holds everywhere."""
    return bool(mask.all()) if type(mask) is np.ndarray else bool(mask)


def largest(x):
    """The largest value of an array (a number: itself)."""
    return x.max().item() if type(x) is np.ndarray else x


def cdiv(a, b):
    """Ceiling division of whole numbers (or arrays of them)."""
    return -(-a // b)
