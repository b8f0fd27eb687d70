"""Admission of this host's tasks: first in, first out, at most `limit` running."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class TaskQueue:
    """Tasks enter at once while there is room and nobody waits; the others
    wait their turn (`wait_turn`), which comes when a running task `leave`s or
    the limit rises. `on_moved(waiting)` is called whenever tasks were admitted
    from the queue, with the tokens still waiting."""

    def __init__(self, limit: int, on_moved: Callable[[list[str]], None]) -> None:
        self.limit = max(1, int(limit))
        self.closed = False
        self._running: set[str] = set()
        self._waiting: dict[str, asyncio.Future[bool]] = {}  # in arrival order
        self._on_moved = on_moved

    @property
    def running_count(self) -> int:
        return len(self._running)

    def tokens(self) -> list[str]:
        """The waiting tasks, first to start first."""
        return list(self._waiting)

    def position(self, token: str) -> int | None:
        """How many tasks wait ahead of `token` (None: it does not wait)."""
        try:
            return self.tokens().index(token)
        except ValueError:
            return None

    def enter_now(self, token: str) -> bool:
        if self.closed or self._waiting or len(self._running) >= self.limit:
            return False
        self._running.add(token)
        return True

    def adopt(self, token: str) -> None:
        """A task that runs already (recovered) counts against the limit."""
        self._running.add(token)

    def wait_turn(self, token: str) -> asyncio.Future[bool]:
        """Resolves True when `token` may start, False when it was removed."""
        turn = asyncio.get_running_loop().create_future()
        self._waiting[token] = turn
        return turn

    def remove(self, token: str) -> bool:
        turn = self._waiting.pop(token, None)
        if turn is None:
            return False
        if not turn.done():
            turn.set_result(False)
        return True

    def leave(self, token: str) -> None:
        self._running.discard(token)
        self._admit()

    def set_limit(self, limit: int) -> None:
        self.limit = max(1, int(limit))
        self._admit()

    def _admit(self) -> None:
        moved = False
        while self._waiting and len(self._running) < self.limit and not self.closed:
            token = next(iter(self._waiting))
            turn = self._waiting.pop(token)
            self._running.add(token)
            if not turn.done():
                turn.set_result(True)
            moved = True
        if moved:
            self._on_moved(self.tokens())
