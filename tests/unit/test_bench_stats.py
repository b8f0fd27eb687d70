"""The bench's own arithmetic: pooled flood percentiles, CPU steal shares and the
split of the wall-time runs.

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


def test_stamps_reads_pairs_and_skips_what_is_not_one(tmp_path: Path) -> None:
    f = tmp_path / "ours"
    f.write_text("100.5 100.8\n \nnot a stamp\n101.0 101.25\n")
    assert run._stamps(f) == [(100.5, 100.8), (101.0, 101.25)]
    assert run._stamps(tmp_path / "missing") == []


def test_wall_split_separates_start_run_and_end() -> None:
    # Two rounds. Direct: spawned at 10.0 / 20.0, its command ran from 2 ms to
    # 302 ms after that, the bench saw the end 1 ms later (303 ms in all).
    # Ours: :SidekickRunTool at 30.0 / 40.0, the command began 6 ms later, ran
    # 4% / 1% longer than the direct run of its round, and Lua got the end
    # 2 ms after the command's last stamp.
    direct = [(10.002, 10.302), (20.002, 20.302)]
    ours = [(30.006, 30.006 + 0.312), (40.006, 40.006 + 0.303)]
    editor = [(50.003, 50.003 + 0.300), (60.003, 60.003 + 0.3105)]
    split = run._wall_split(
        {"direct": direct, "ours": ours, "editor": editor},
        [10.0, 20.0],
        [303.0, 303.0],
        [30.0, 40.0],
        [30.006 + 0.312 + 0.002, 40.006 + 0.303 + 0.002],
    )
    assert split is not None
    assert split["n"] == 2
    assert abs(split["direct_start"] - 2.0) < 1e-6
    assert abs(split["direct_end"] - 1.0) < 1e-6
    assert abs(split["ours_start"] - 6.0) < 1e-6
    assert abs(split["ours_end"] - 2.0) < 1e-6
    assert abs(split["ours_inner"] - 1.025) < 1e-9  # median of 1.04 and 1.01
    assert abs(split["editor_inner"] - 1.0175) < 1e-9
    assert split["ours_slow"] == 1  # 1.04; 1.01 is not
    assert split["editor_slow"] == 1  # 1.035


def test_wall_split_needs_every_stamp() -> None:
    one = [(1.0, 1.3)]
    full = {"direct": one, "ours": one, "editor": one}
    assert run._wall_split(full, [0.9], [400.0], [0.9], [1.4]) is not None
    # a side lost a line: the rounds no longer pair up
    assert run._wall_split({**full, "ours": []}, [0.9], [400.0], [0.9], [1.4]) is None
    # without $EPOCHREALTIME both stamps of a line are equal (or empty)
    flat = {"direct": [(0.0, 0.0)], "ours": one, "editor": one}
    assert run._wall_split(flat, [0.9], [400.0], [0.9], [1.4]) is None


def test_wait_quiet_returns_once_nothing_runs_and_waits_out_a_busy_process() -> None:
    import subprocess

    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # a sleeping process is quiet: the wait ends before its limit
        assert run.wait_quiet([idle.pid], quiet=0.05, limit=20.0) < 20.0
        # a spinning one never is: the wait lasts its whole limit (the quiet
        # window is long enough that a loaded machine still runs it within it)
        assert run.wait_quiet([busy.pid], quiet=0.3, limit=1.0) >= 1.0
    finally:
        for p in (idle, busy):
            p.kill()
            p.wait()
    # a process that is gone uses no CPU
    assert run._cpu_ticks(busy.pid) == 0
