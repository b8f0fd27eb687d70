"""`make demo HEADLESS=1` walks the example chat and prints it: run that walk-through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_headless_demo_runs_every_call_and_prints_settled_diagnostics() -> None:
    env = dict(os.environ, HEADLESS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    chat, _, diags = proc.stdout.partition("\n-- diagnostics --\n")
    for n in (1, 2, 3):
        assert f"```result id=call_0{n} status=completed" in chat
    rows = chat.split("\n")
    expected = [
        f"{rows.index(header) + 1}: ✓ {tool}"
        for header, tool in (
            ("```tool list_directory id=call_01", "list_directory"),
            ("```tool read_files id=call_02", "read_files"),
            ("```tool run_terminal_command id=call_03", "run_terminal_command"),
        )
    ]
    assert diags.strip().split("\n") == expected
