"""Work remembered by the identity of what it was done to.

For objects that are the same from one use to the next but have no room to keep
what was made of them (a chat's blocks: frozen, and shared between turns). The
memo keeps each key's objects alive with its value: an id cannot be reused while
its entry lives, so an entry found is always for the very same objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """``make(*args)`` for a sequence of objects, computed once while they live.

    ``limit`` bounds the entries; past it the memo starts again (a chat sent many
    times stays found: its blocks are asked for again right away).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[tuple[int, ...], tuple[Sequence[object], V]] = {}
        self._lock = threading.Lock()  # requests are built in worker threads

    def get(self, objects: Sequence[object], make: Callable[..., V], *args: object) -> V:
        key = tuple(map(id, objects))
        hit = self._entries.get(key)
        if hit is not None:
            return hit[1]
        value = make(*args)
        with self._lock:
            if len(self._entries) >= self.limit:
                self._entries.clear()
            self._entries[key] = (tuple(objects), value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
