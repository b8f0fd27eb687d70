"""The bench's arithmetic and its waits, shared by every section."""

from __future__ import annotations

import statistics
import time
from typing import Any

from nvimctl import proc_stat


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q / 100.0 * (len(s) - 1)))))
    return s[k]


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def cpu_ticks(pid: int) -> int:
    """CPU time (user + system, clock ticks) `pid` has used; 0 once it is gone."""
    fields = proc_stat(pid)
    return int(fields[11]) + int(fields[12]) if fields else 0


def wait_quiet(pids: list[int], quiet: float = 0.1, limit: float = 5.0) -> float:
    """Wait until none of `pids` has used CPU for `quiet` seconds (at most
    `limit` seconds); returns how long that took: what one side's run leaves
    behind must not land in the next side's run."""
    t0 = time.monotonic()
    last = [cpu_ticks(p) for p in pids]
    since = t0
    while time.monotonic() - t0 < limit:
        time.sleep(0.02)
        now = [cpu_ticks(p) for p in pids]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return time.monotonic() - t0


def rtt_figures(idle: list[float], busy: list[float]) -> dict[str, Any]:
    """p50, p99 and max of the round-trips at idle and during a flood."""
    return {
        "idle_p50": med(idle),
        "idle_p99": pct(idle, 99),
        "idle_max": max(idle or [0]),
        "p50": med(busy),
        "p99": pct(busy, 99),
        "max": max(busy or [0]),
        "n": len(busy),
    }


def trio(d: dict, prefix: str) -> str:
    return f"{d[prefix + 'p50']:.2f} / {d[prefix + 'p99']:.2f} / {d[prefix + 'max']:.2f}"
