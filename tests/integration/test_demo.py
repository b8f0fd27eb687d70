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


def _read_until(fd: int, predicate, timeout: float = 60) -> str:
    """Read a pty until the text seen (terminal escapes removed) satisfies `predicate`."""
    import re
    import select
    import time

    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other side closed
                chunk = b""
            if not chunk:
                break
            seen += chunk
        text = re.sub(rb"\x1b(\[[0-9;?<=>]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|.)", b"", seen)
        text = text.decode("utf-8", "replace")
        if predicate(text):
            return text
    raise AssertionError(f"never seen; got: {seen[-2000:]!r}")


@pytest.mark.integration
def test_interactive_demo_shows_its_hint_and_cleans_up_on_exit() -> None:
    """`make demo` in a terminal: the hint stays on screen, the temporary
    directory is gone once Neovim exits."""
    import fcntl
    import pty
    import re
    import struct
    import termios

    env = dict(os.environ, TERM="xterm-256color")
    env.pop("HEADLESS", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    try:
        text = _read_until(master, lambda t: "<Space>sr runs it" in t and "demo chat:" in t)
        chat = Path(re.search(r"demo chat: (\S+\.sidekick\.md)", text).group(1))
        base = chat.parent.parent
        assert base.name.startswith("sidekick-demo-") and base.exists()
        os.write(master, b"\x1b:qa!\r")
        text = _read_until(master, lambda t: f"demo: removed {base}" in t)
        assert proc.wait(timeout=30) == 0
        assert not base.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
