"""Command-line options made from a grid's settings (``sweep.setting``): each field of a part is
an option, ``--NAME`` or its own flag, with the field's help, its reader and its default; a grid
(or one part) is made back from the parsed arguments by name."""
from __future__ import annotations

import argparse
from dataclasses import fields

from ..sweep.grid import Grid
from .common import engine_arg, finite_float, fraction, int_list, kv_cache_tokens_arg, number_list, str_list


def temporaries_arg(text: str) -> str | None:
    """--temporaries: deepgemm, reference, or none (None)."""
    if text not in ("deepgemm", "reference", "none"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be one of deepgemm, reference, none")
    return None if text == "none" else text


# how an option's text is read (``setting(read=...)``), and whether it gives one value of an axis
READERS = {"int": (int, True), "ints": (int_list, False), "number": (finite_float, True),
           "numbers": (number_list, False), "strs": (str_list, False), "fraction": (fraction, True),
           "engine": (engine_arg, True), "kv_cache_tokens": (kv_cache_tokens_arg, True),
           "temporaries": (temporaries_arg, True), None: (None, True)}


def add_setting_options(p: argparse.ArgumentParser, *parts: type, skip: tuple[str, ...] = ()) -> None:
    """An option for each setting of the ``parts`` (``Grid.PARTS``' classes) but those in ``skip``."""
    for part in parts:
        for f in fields(part):
            if f.name not in skip:
                add_setting_option(p, f)


def add_setting_option(p: argparse.ArgumentParser, f) -> None:
    m = f.metadata
    help = m["help"]() if callable(m["help"]) else m["help"]
    flag = m["flag"] or "--" + f.name.replace("_", "-")
    if not help:
        raise ValueError(f"setting {f.name!r} has no help: every option says what it is")
    if m["read"] == "off":  # a switch that turns the setting off (--no-padding)
        p.add_argument(flag, dest=f.name, action="store_false", help=help)
        return
    if m["read"] == "yes-no":  # --NAME / --no-NAME, or neither (None)
        p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help)
        return
    reader, one = READERS[m["read"]]
    default = f.default
    if one and isinstance(default, tuple) and len(default) == 1:  # an axis the option gives one value of
        default = default[0]
    p.add_argument(flag, dest=f.name, type=reader, default=default, help=with_default(help, default),
                   metavar=m["metavar"], choices=m["choices"])


def with_default(help: str, default) -> str:
    """A setting's help with its default, as the option is written, where the help does not say it."""
    if default is None or "default" in help:
        return help
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else str(default) or "none"
    return f"{help} (default: {shown})"


def grid_from_args(args: argparse.Namespace) -> Grid:
    """The grid the parsed options name: every setting the parser has an option for, by name."""
    given = vars(args)
    return Grid.of(**{name: given[name] for name in Grid.setting_names() if name in given})


def part_from_args(part: type, args: argparse.Namespace):
    """One part of a grid from the parsed options (its settings without an option at their default)."""
    given = vars(args)
    return part(**{f.name: given[f.name] for f in fields(part) if f.name in given})
