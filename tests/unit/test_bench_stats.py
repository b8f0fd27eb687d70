"""The bench's own arithmetic: pooled flood percentiles and CPU steal shares.

These decide what docs/benchmarks.md says, so they are tested like the plugin's
logic. No timing is measured here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import run  # noqa: E402


def _flood(idle: list[float], busy: list[float], **extra: float) -> dict:
    """One flood's figures as `_flood_stats` returns them (the probes kept)."""
    t0, t1 = 10.0, 20.0
    data = {
        "t": [1.0 + i * 0.01 for i in range(len(idle))] + [t0 + i * 0.01 for i in range(len(busy))],
        "rtt": idle + busy,
        "rss": {"1": [[5.0, 1000], [15.0, 1000 + extra.get("grow_kib", 0)]]},
    }
    return run._flood_stats(data, 1, None, t0, t1, extra.get("wall_ms", 100.0))


def test_flood_stats_splits_idle_from_busy_probes() -> None:
    stats = _flood([0.1] * 10, [0.5] * 10, grow_kib=2048)
    assert stats["idle_p99"] == 0.1
    assert stats["p99"] == 0.5
    assert stats["n"] == 10
    assert stats["rss_growth_mb"] == 2.0


def test_pooled_p99_counts_every_probe_of_every_flood() -> None:
    # One flood with 2% slow probes, two without any: the pooled p99 is over
    # all 300 probes (6 slow of 300 = 2%), not the median of the floods' p99s
    # (which would be fast) nor their worst (slow).
    a = _flood([0.1] * 100, [0.2] * 98 + [9.0, 9.0], wall_ms=300.0, grow_kib=1024)
    b = _flood([0.1] * 100, [0.2] * 100, wall_ms=100.0, grow_kib=3072)
    c = _flood([0.1] * 100, [0.2] * 96 + [5.0] * 4, wall_ms=200.0)
    pooled = run._pool_floods([a, b, c])
    assert pooled["n"] == 300
    assert pooled["max"] == 9.0
    assert pooled["p99"] == 5.0  # the 297th of 300 sorted values
    assert pooled["p50"] == 0.2
    assert pooled["idle_p99"] == 0.1
    assert pooled["wall_ms"] == 200.0  # median
    assert pooled["rss_growth_mb"] == 3.0  # the largest
    assert [r["p99"] for r in pooled["runs"]] == [9.0, 0.2, 5.0]
    assert all("busy_rtt" not in r and "idle_rtt" not in r for r in pooled["runs"])


def test_steal_share_is_the_stolen_part_of_the_elapsed_cpu_time() -> None:
    before = [100, 0, 50, 800, 0, 0, 0, 50, 7, 0]
    after = [200, 0, 100, 1550, 0, 0, 0, 150, 9, 0]  # +100 +50 +750 +100 steal
    assert run.steal_share(before, after) == 10.0
    assert run.steal_share(before, before) is None
    assert run.steal_share(None, after) is None
    assert run.steal_share([1, 2, 3], [4, 5, 6]) is None  # no steal counter


def test_steal_text_names_each_section() -> None:
    text = run.steal_text(2.5, {"wall": 0.4, "flood": 6.25, "cold": None})
    assert text == "2.5% of the CPU time during the run (wall 0.4%, flood 6.2%)"
    assert run.steal_text(None, {"wall": 1.0}) == "not counted here"


def test_cpu_times_reads_this_machine() -> None:
    times = run.cpu_times()
    if not Path("/proc/stat").exists():
        assert times is None
        return
    assert times is not None and len(times) >= 8
    assert all(isinstance(x, int) and x >= 0 for x in times)
