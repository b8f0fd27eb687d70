"""Shared test helpers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

# Hosts and MCP servers the tests start read engine knobs from here: a progress
# tick and an adopted-task poll short enough that no test waits out a second.
os.environ.setdefault(
    "SIDEKICK_TOOLS_TUNING", json.dumps({"poll_interval": 0.2, "adopted_poll_interval": 0.1})
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """An integration test's package code runs in the hosts and MCP servers it
    starts, each measured on its own: the test process only drives an editor,
    and tracing that (pynvim, the fake provider, the polls) doubled its CPU
    time for nothing the report counts. Coverage pauses here for the test:
    every instance, pytest-cov's and the one COVERAGE_PROCESS_START started
    (stopping the first resumes the second's tracer)."""
    paused = []
    if item.get_closest_marker("integration") is not None:
        import coverage

        while (cov := coverage.Coverage.current()) is not None:
            cov.stop()
            paused.append(cov)
    try:
        yield
    finally:
        for cov in reversed(paused):
            cov.start()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked slow first: started last, one of them would keep the whole
    parallel run waiting on a single worker."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll `predicate` until it returns a truthy value; fail after `timeout` seconds.
    The pause between polls grows from `interval` to five times it: what comes soon
    is seen soon, and a long wait does not spend the CPU the editor and host under
    test need on polling them (a poll is an editor request or more)."""
    deadline = time.monotonic() + timeout
    pause = interval
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(pause)
        pause = min(pause * 1.25, interval * 5)
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}")


def answers(
    request: Callable[[], Any],
    deadline: float = 20.0,
    unblock: Callable[[], Any] | None = None,
) -> Any:
    """``request()`` (an editor request) run in a thread: its value, or an
    AssertionError when it has not answered by ``deadline``, after ``unblock()``
    (kill what holds the editor: the thread, and the editor, are then free for
    the test's clean-up). Tests that check the editor is never held make what
    could hold it last longer than the deadline, so a held editor fails here
    instead of hanging the suite; the deadline is a wait, not a speed figure."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = request()
        except BaseException as exc:  # shown to the test below
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline)
    held = thread.is_alive()
    if held and unblock is not None:
        unblock()
        thread.join(deadline)
    if held:
        raise AssertionError(f"the editor gave no answer within {deadline} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes below ``pid`` (Linux /proc)."""
    from sidekick_tools.tasks.identity import proc_stat

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = proc_stat(int(entry)) if entry.isdigit() else None  # state, ppid, ...
        if fields and len(fields) > 1 and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[tuple[int, str]] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append((child, argv))
        todo += children.get(child, [])
    return found


async def until(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    """`wait_for` for coroutines: poll `predicate` without blocking the event loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.01)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """`tmpfs(name, size="2m", read_only=False)` mounts a small tmpfs under
    tmp_path (a full disk, a read-only state dir); skips where mounting is not
    allowed (not root). Unmounted (lazily) at the end."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "2m", read_only: bool = False) -> Path:
        path = tmp_path / name
        path.mkdir()
        options = f"size={size},mode=0700" + (",ro" if read_only else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def read_text(path: str | None) -> str:
    """The file's text; "" when it is not there (yet)."""
    try:
        with open(path or "") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def live_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group (Linux; elsewhere its leader)."""
    from sidekick_tools.tasks import groups

    members = groups.group_members(pgid)
    if members is None:
        return [pgid] if groups.group_alive(pgid) else []
    return members


@pytest.fixture(scope="session", autouse=True)
def fork_servers() -> Iterator[None]:
    """The fork servers of this pytest process (tests/forkserver.py) stop when
    its tests are done, once the processes they forked have ended: before
    pytest-cov combines coverage's data, so that no child is still writing its
    file then."""
    yield
    from tests.forkserver import SERVERS

    SERVERS.close()
