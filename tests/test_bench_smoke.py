"""`bench/run.py --quick` runs end to end and writes a table with every row.

No timing is asserted here: benchmarks are measured by `make bench`, never by tests.
It runs the whole harness, so it runs under `make bench` (marker `bench`), not `make test`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import nvims

ROOT = Path(__file__).resolve().parents[1]

ROWS = (
    "request round-trip at idle",
    "request round-trip while 2 tasks print 1 MB each",
    "the same floods started outside the editor",
    "editor memory growth during that",
    "time until all 2 floods ended",
    "task wall time",
    "warm `:SidekickRunTool` → running diagnostic shown",
    "cold first command",
    "plugin cost at Neovim start-up",
    "`:SidekickRunTool` in a",
    "stored tasks",
    "concurrent short tasks",
    "host idle memory",
    "memory per running task",
    "request round-trip at idle, just before each reply",
    "request round-trip while a reply streams at 2000 tokens/s",
    "a streamed delta's arrival at the host → its text",
    "`send` on a 1,003-line chat → first request byte",
    "longest request round-trip from `send` to the first delta",
    "editor memory growth over a 0.05 MB streamed reply",
)


@pytest.mark.integration
@pytest.mark.bench
def test_quick_bench_writes_every_row(tmp_path: Path) -> None:
    if not nvims.available():
        pytest.skip("no nvim")
    out, png, raw = tmp_path / "bench.md", tmp_path / "bench.png", tmp_path / "raw.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--out",
            str(out),
            "--png",
            str(png),
            "--json",
            str(raw),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    md = out.read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    for name in ROWS:
        assert any(name in line for line in table), f"no row {name!r} in:\n{md}"
        assert name in proc.stdout
    for field in ("CPU", "RAM", "date", "commit"):
        assert f"| {field} |" in md
    assert "| CPU steal (time the hypervisor gave other guests) | " in md
    data = json.loads(raw.read_text())
    rows = data["rows"]
    assert len(rows) == len(ROWS)
    assert all(r["target"] for r in rows)
    # the wall-time runs are split by the stamps their command writes
    wall = data["raw"]["wall"]
    assert len(wall["stamps"]["ours"]) == len(wall["direct"]) == len(wall["editor"])
    # the streaming rows: each side's stamps were seen in its buffer, each send reached the fake
    streamed = data["raw"]["streaming"]
    for side in ("ours", "curl"):
        assert streamed[side]["streams"][0]["lat"], side
        assert len(streamed[side]["sends"]) == 2 and all(v > 0 for v in streamed[side]["sends"])
    assert "## Streaming a reply (the chat loop)" in md
    if shutil.which("bash"):
        assert wall["split"]["n"] == len(wall["direct"])
        assert wall["split"]["ours_start"] > 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert png.stat().st_size > 0
