"""Process groups: every task runs in one of its own (pgid == the supervisor's
pid), so halting a task signals the whole tree it started."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from .identity import IS_LINUX, proc_stat

GROUP_POLL_INTERVAL = 0.05  # while waiting for a signalled group to disappear
KILL_WAIT = 2.0  # after SIGKILL, how long to wait for the group to vanish


def _group_members_linux(pgid: int) -> list[int] | None:
    """Live (non-zombie) pids whose process group is `pgid`; None if /proc is unusable."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    live = []
    for name in names:
        if not name.isdigit():
            continue
        fields = proc_stat(int(name))
        if fields is None or len(fields) < 3:
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            live.append(int(name))
    return live


def group_members(pgid: int) -> list[int] | None:
    """Linux: live members of process group `pgid` (zombies excluded); elsewhere None."""
    return _group_members_linux(pgid) if IS_LINUX else None


def group_alive(pgid: int) -> bool:
    """Does any live (non-zombie) process remain in group `pgid`?"""
    if not pgid or pgid <= 1:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if IS_LINUX:
        # Zombies (not yet reaped by their parent, or orphans under an init
        # that does not reap) still answer killpg(0); they are gone for us.
        members = _group_members_linux(pgid)
        if members is not None:
            return bool(members)
    return True


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False if the group no longer exists."""
    if not pgid or pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


async def terminate_group(pgid: int, grace: float) -> bool:
    """SIGTERM the group; SIGKILL it if anything is left after `grace` seconds.

    Returns True when SIGKILL was needed. Waits (without blocking the loop)
    until the group is gone or `KILL_WAIT` seconds after SIGKILL.
    """
    loop = asyncio.get_running_loop()
    if not signal_group(pgid, signal.SIGTERM):
        return False
    deadline = loop.time() + max(0.0, grace)
    while loop.time() < deadline:
        if not group_alive(pgid):
            return False
        await asyncio.sleep(GROUP_POLL_INTERVAL)
    if not group_alive(pgid):
        return False
    signal_group(pgid, signal.SIGKILL)
    deadline = loop.time() + KILL_WAIT
    while group_alive(pgid) and loop.time() < deadline:
        await asyncio.sleep(GROUP_POLL_INTERVAL)
    return True


def kill_groups_now(pgids: list[int], grace: float = 0.2) -> list[int]:
    """Synchronous, for exit paths without a loop: SIGTERM every group, wait up
    to `grace` seconds, SIGKILL whatever is left. Returns the groups killed."""
    live = [p for p in pgids if signal_group(p, signal.SIGTERM)]
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [p for p in live if group_alive(p)]
    for p in live:
        signal_group(p, signal.SIGKILL)
    return live
