"""How a bad value is refused: a ``BadValue`` (a ValueError) whose message names the value and
the rule in one line, and whose ``name`` says which setting it was given for, so that a caller
(a notebook's parameters, the command line) can name its own parameter."""
from __future__ import annotations


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
