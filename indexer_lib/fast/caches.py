"""Bounded caches a frontier fills by the hundred thousand: the planned steps, the slicings of
requests planned alone and the shapes' bytes, each kept per set of settings so a lookup hashes
only its own key."""
from __future__ import annotations


class PerSettings(dict):
    """settings -> {key: value}.  Every table is emptied once they hold ``limit`` entries in all,
    so memory stays bounded in a long-lived dashboard; the tables themselves stay (a caller may
    hold one)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.entries = 0

    def of(self, settings) -> dict:
        """The table of these settings (empty at first)."""
        table = self.get(settings)
        if table is None:
            table = self[settings] = {}
        return table

    def add(self, table: dict, key, value):
        """``table[key] = value`` (``table`` from ``of``), counted against the limit."""
        if self.entries >= self.limit:
            for known in self.values():
                known.clear()
            self.entries = 0
        table[key] = value
        self.entries += 1
        return value

    def clear(self) -> None:
        super().clear()
        self.entries = 0
