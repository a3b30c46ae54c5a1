"""How a bad value is refused: a ``BadValue`` (a ValueError) whose message names the value and
the rule in one line, and whose ``name`` says which setting it was given for, so that a caller
(a notebook's parameters, the command line) can name its own parameter.  An unknown name is
refused the same way, with the nearest known names (``unknown_name``)."""
from __future__ import annotations

import difflib


class BadValue(ValueError):
    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    """A whole number >= minimum (and <= maximum), or BadValue naming the value and the rule."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise BadValue(name, f"{name} {value!r}: must be a whole number >= {minimum}")
    if value < minimum:
        raise BadValue(name, f"{name} {value!r}: must be a whole number >= {minimum}")
    if maximum is not None and value > maximum:
        raise BadValue(name, f"{name} {value!r}: must be at most {maximum}")
    return value


# beyond this many known names a refusal lists the first few and says how many more there are
LISTED = 12


def unknown_name(name: str, what: str, given, known, near=None, rule: str | None = None) -> BadValue:
    """The refusal of a name that is not among ``known``, in one short line: the nearest known
    names (``near``, else those spelled alike; at most three) where some are close, else the rule
    (``rule``, else the known names, the first ``LISTED`` of a long list)."""
    known = list(known)
    if near is None:
        near = difflib.get_close_matches(str(given).strip().lower(), known, n=3)
    near = list(dict.fromkeys(near))[:3]
    if near:
        return BadValue(name, f"unknown {what} {given!r}: did you mean {or_list(near)}?")
    if rule is None:
        more = f" and {len(known) - LISTED} more" if len(known) > LISTED else ""
        rule = f"one of {', '.join(known[:LISTED])}{more}"
    return BadValue(name, f"unknown {what} {given!r}: must be {rule}")


def or_list(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
