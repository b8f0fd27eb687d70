"""Shared test helpers."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll `predicate` until it returns a truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


async def until(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    """`wait_for` for coroutines: poll `predicate` without blocking the event loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.01)
