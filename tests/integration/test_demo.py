"""`make demo`: the chat loop against the scripted model, offline. `make demo
HEADLESS=1` walks it as a user would and prints the chat: run that walk-through,
and the interactive one in a terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.slow
def test_headless_demo_walks_the_chat_loop_against_the_scripted_model() -> None:
    """The printed chat: the streamed replies, the safe calls' results sent back
    by the loop, the command run after consent, and the final answer that
    follows from its result."""
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
    chat, _, rest = proc.stdout.partition("\n-- diagnostics --\n")
    diags, _, usage = rest.partition("\n-- usage (virtual text on each ASSISTANT: line) --\n")
    rows = chat.removesuffix("\n").split("\n")  # print() ended it with a newline
    # labelled: a scripted model, offline
    assert rows[:2] == ["---", "model: demo/scripted"]
    assert "no network, no API key" in rows[2]

    def at(line: str) -> int:
        assert line in rows, f"{line!r} not in the chat:\n{chat}"
        return rows.index(line)

    def starting(prefix: str) -> int:
        found = [i for i, r in enumerate(rows) if r.startswith(prefix)]
        assert found, f"no line starts with {prefix!r} in the chat:\n{chat}"
        return found[0]

    first = at("ASSISTANT: I'll look around the project first.")
    ls = at("```tool list_directory id=toolu_demo_ls")
    ls_result = starting("```result id=toolu_demo_ls status=completed")
    read = at("```tool read_files id=toolu_demo_read")
    second = starting("ASSISTANT: There is one script")
    run = at("```tool run_terminal_command id=toolu_demo_run")
    run_result = starting("```result id=toolu_demo_run status=completed exit=0 ")
    final = starting("ASSISTANT: It runs.")
    assert first < ls < ls_result < read < second < run < run_result < final
    assert rows[ls_result + 1 : ls_result + 3] == ["demo.sidekick.md", "hello.py"]
    assert '    print(f"hello #{i + 1}")' in rows[read:second]
    assert rows[run_result + 1 : run_result + 4] == ["hello #1", "hello #2", "hello #3"]
    assert "With `--count 3` it printed `hello #1` to `hello #3`" in rows[final]
    assert "(A scripted reply" in chat.split("ASSISTANT: It runs.")[1]
    assert rows[-1] == "USER: "
    assert diags.strip().split("\n") == [
        f"{ls + 1}: ✓ list_directory",
        f"{read + 1}: ✓ read_files",
        f"{run + 1}: ✓ run_terminal_command",
    ]
    # each reply's usage: its ASSISTANT: line's number, then the tokens in and out
    marks = [line.split(": ", 1) for line in usage.strip().split("\n")]
    assert [int(n) - 1 for n, _ in marks] == [first, second, final]
    assert all(text.startswith("↑") and "↓" in text for _, text in marks)


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
@pytest.mark.slow
def test_interactive_demo_sends_on_its_key_and_cleans_up_on_exit() -> None:
    """`make demo` in a terminal: the hint stays on screen, the send key streams
    the scripted reply and the loop stops at the call that needs consent; the
    temporary directory is gone once Neovim exits."""
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
        text = _read_until(
            master,
            lambda t: "scripted model (offline): <Space>ss" in t and "<Space>sr runs it" in t,
        )
        chat = Path(re.search(r"demo chat: (\S+\.sidekick\.md)", text).group(1))
        base = chat.parent.parent
        assert base.name.startswith("sidekick-demo-") and base.exists()
        assert "no network, no API key" in text
        os.write(master, b" ss")
        _read_until(master, lambda t: "toolu_demo_run needs your consent" in t)
        os.write(master, b" sR")  # as the hint says: asks to run it
        _read_until(master, lambda t: "[C]ancel" in t)
        os.write(master, b"r")
        _read_until(master, lambda t: "✓ run_terminal_command" in t)
        os.write(master, b"\x1b:qa\r")  # the chat changed: saved (autowriteall), not refused
        text = _read_until(master, lambda t: f"demo: removed {base}" in t)
        assert proc.wait(timeout=30) == 0
        assert not base.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
