"""How a grid's settings are declared: each is a field of one frozen part of the grid
(``GridPlan``, ``SchedulerSettings``, ``Deployment``, ``Axes``), and the field says what the
command line needs to take it (``cli.options``): its help, how an option's text is read, and
the option's name where it is not ``--NAME``.  A part makes its tuple settings tuples and checks
its own values once, when it is made; ``where`` gives it with some settings changed.
"""
from __future__ import annotations

import functools
from dataclasses import field, fields, replace

from ..checks import BadValue


def setting(default, help="", *, read: str | None = None, flag: str | None = None, metavar: str | None = None,
            choices: tuple | None = None):
    """A setting's field: its default, its help (a text, or a function making it when a parser
    is made, for a text that reads the engine profiles), and how an option gives it: ``read``
    names one of ``cli.options.READERS`` (default: the text as it is), ``flag`` the option where
    it is not --NAME."""
    return field(default=default, metadata={"help": help, "read": read, "flag": flag, "metavar": metavar,
                                            "choices": choices})


@functools.cache
def declared(part: type) -> dict:
    """A part's fields by name, looked up once per class (a dashboard move reads them)."""
    return {f.name: f for f in fields(part)}


def is_tuple(f) -> bool:
    """A setting holding a tuple of values (an axis), as its annotation says."""
    return f.type.startswith("tuple")


def as_value(f, value):
    """A setting's value as the part holds it: a tuple setting's list (YAML and JSON give lists)
    or single value made a tuple, so the part stays hashable; None stays None where allowed."""
    if not is_tuple(f) or (value is None and f.type.endswith("None")):
        return value
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


class Settings:
    """A frozen part of a grid (a dataclass deriving from it): its values held as ``as_value``
    spells them, then checked by ``check``, once."""

    def __post_init__(self):
        for f in declared(type(self)).values():
            value = as_value(f, getattr(self, f.name))
            if is_tuple(f) and value is not None and not value:
                raise BadValue(f.name, f"{f.name} is empty: the grid needs at least one value")
            object.__setattr__(self, f.name, value)
        self.check()

    def check(self) -> None:
        """The part's own rules (one spelling of each value set here too); a bad value raises
        ``BadValue`` naming it and the rule."""

    def where(self, **changes):
        """This part with ``changes``, made and checked again; itself where every change holds
        the value it has (so what was derived from it is kept)."""
        known = declared(type(self))
        unknown = [name for name in changes if name not in known]
        if unknown:
            raise TypeError(f"{type(self).__name__} has no setting {unknown[0]!r}")
        if all(as_value(known[k], v) == getattr(self, k) for k, v in changes.items()):
            return self
        return replace(self, **changes)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(declared(cls))

    def values(self) -> dict:
        """Each setting's value by name."""
        return {name: getattr(self, name) for name in declared(type(self))}

    @classmethod
    def defaults(cls) -> dict:
        return {name: f.default for name, f in declared(cls).items()}
