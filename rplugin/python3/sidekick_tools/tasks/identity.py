"""Process identity: (pid, start token), never a bare pid.

On Linux the start token is the boot id plus field 22 of /proc/PID/stat (start
time in clock ticks since boot); elsewhere the output of `ps -o lstart=`. An
owner (a Neovim, an MCP server) is "<pid>:<start token>" of that process.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..programs import find_program

IS_LINUX = sys.platform.startswith("linux")
_boot_id: str | None = None


def _linux_boot_id() -> str:
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _boot_id = f.read().strip()
        except OSError:
            _boot_id = "noboot"
    return _boot_id


def proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (index 0 is the state), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    close = data.rfind(b")")
    if close < 0:
        return None
    return data[close + 2 :].decode("ascii", "replace").split()


def start_token(pid: int, zombie_ok: bool = False) -> str | None:
    """A token identifying the process `pid` for its whole life, or None if gone.

    A zombie counts as gone, except with `zombie_ok`: our own child that has
    already exited (a short task on a loaded machine) still has its identity."""
    if pid <= 0:
        return None
    if IS_LINUX and os.path.isdir("/proc/self"):
        fields = proc_stat(pid)
        dead = ("X",) if zombie_ok else ("Z", "X")
        if fields is None or len(fields) < 20 or fields[0] in dead:
            return None
        return f"{_linux_boot_id()}:{fields[19]}"
    try:
        out = subprocess.run(
            # the system's ps, never one a relative PATH entry finds in the project
            [find_program("ps") or "/bin/ps", "-o", "lstart=", "-p", str(pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.decode("utf-8", "replace").strip()
    return f"lstart:{' '.join(text.split())}" if out.returncode == 0 and text else None


def is_alive(pid: int | None, token: str | None) -> bool:
    """True only if `pid` runs and is the very process `token` was taken from."""
    if not pid or not token:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, someone else's: the token decides
    return start_token(pid) == token


def owner_token(pid: int) -> str:
    """Owner string for the Neovim process `pid`: "<pid>:<start token>"."""
    return f"{pid}:{start_token(pid) or 'unknown'}"


def parse_owner(owner: str) -> tuple[int, str] | None:
    pid, sep, token = (owner or "").partition(":")
    if not sep or not pid.isdigit():
        return None
    return int(pid), token


def owner_alive(owner: str) -> bool:
    parsed = parse_owner(owner)
    return parsed is not None and is_alive(parsed[0], parsed[1])


def owner_gone(owner: str, seen: dict[str, bool]) -> bool:
    """`owner` (a Neovim's or MCP server's) no longer runs; `seen` keeps each
    owner's answer, so a list of tasks looks at each owner once."""
    if owner not in seen:
        seen[owner] = not owner_alive(owner)
    return seen[owner]
