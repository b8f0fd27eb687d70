"""Finished tasks past retention lose their rows and log directories
(`tasks.retention`; a result nobody read is kept twice as long). Runs at
recovery, then every `purge_interval` seconds, or more often under a short
retention: a quarter of the shortest, at least a second apart (a retention of
a minute is not left to the next hour)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from typing import TYPE_CHECKING

from .model import is_token
from .store import StoreError

if TYPE_CHECKING:
    from .engine import TaskEngine

log = logging.getLogger(__name__)


def _remove_dirs(dirs: list[str]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


class Retention:
    def __init__(self, engine: TaskEngine) -> None:
        self.engine = engine
        self._timer: asyncio.TimerHandle | None = None

    async def purge(self, now: float | None = None) -> list[str]:
        """Remove finished tasks past retention: rows and log directories."""
        keep = self.engine.config.retention
        try:
            now = time.time() if now is None else now
            tokens = self.engine.store.purge(now, keep.completed, keep.failed)
        except StoreError:
            log.exception("task purge failed")
            return []
        # tokens come from the database: checked before a path is built from one
        dirs = [self.engine.log_dir_for(t) for t in tokens if is_token(t)]
        if dirs:
            await asyncio.get_running_loop().run_in_executor(None, _remove_dirs, dirs)
        return tokens

    def start(self) -> None:
        """Purge every `purge_interval` seconds from now on (`interval`)."""
        self.stop()
        interval = self.interval()
        if interval <= 0:
            return

        def fire() -> None:
            self._timer = None
            self.engine.background(self.purge())
            self.start()

        self._timer = asyncio.get_running_loop().call_later(interval, fire)

    def interval(self) -> float:
        every = self.engine.tuning.purge_interval
        if every <= 0:
            return every  # off
        keep = self.engine.config.retention
        return min(every, max(1.0, min(keep.completed, keep.failed) / 4))

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
