"""Starting a task: `spawn` runs the supervisor wrapper (see `wrapper`) in a process
group of its own and hands back the `ChildProcess` to await; `SpawnError` says
why it could not, for the user."""

from __future__ import annotations

import errno
import functools
import logging
import os
import subprocess
import sys

from .identity import start_token
from .process import ChildProcess
from .wrapper import SUPERVISOR_NAME, WRAPPER, guarded

log = logging.getLogger(__name__)

ARG_MAX_BYTES = 128 * 1024 - 1  # Linux's MAX_ARG_STRLEN, its final NUL byte aside


class SpawnError(Exception):
    """The task could not be started; the message says why, for the user."""


def spawn(
    command: str,
    log_dir: str,
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    nice: int = 0,
    task_id: str | None = None,
) -> ChildProcess:
    """Start `command` under the supervisor wrapper; raise SpawnError with a
    message for the user when that is impossible (bad cwd, bad env, no shell).

    `nice` > 0 lowers the task's CPU priority: its process group runs that many
    steps nicer than this process (like `nice -n`, capped at 19). Failing to
    set it is logged, never fatal.

    `task_id` becomes the command's SIDEKICK_TASK_ID; the wrapper exports it,
    so a task without extra `env` runs in the host's environment as it is,
    never copied."""
    log_dir = os.path.abspath(log_dir)
    if cwd:
        cwd = os.path.abspath(os.path.expanduser(cwd))
        if not os.path.exists(cwd):
            raise SpawnError(f"working directory {cwd} does not exist")
        if not os.path.isdir(cwd):
            raise SpawnError(f"working directory {cwd} is not a directory")
        if not os.access(cwd, os.X_OK):
            raise SpawnError(f"working directory {cwd} is not accessible (permission denied)")
    full_env = None  # None: the host's own environment, without copying it
    if env:
        full_env = dict(os.environ)
        for key, value in env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key:
                raise SpawnError(f"invalid environment variable name {key!r}")
            full_env[key] = "" if value is None else str(value)
    try:
        os.makedirs(log_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise SpawnError(f"cannot create the task's log directory {log_dir}: {exc}") from exc
    argument = guarded(command, log_dir)  # the command, after the halt file's check
    try:
        popen = subprocess.Popen(
            ["/bin/sh", "-c", WRAPPER, SUPERVISOR_NAME, argument, log_dir, _umask()]
            + ([task_id] if task_id else []),
            cwd=cwd or None,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_detach_kwargs(),
            close_fds=True,
        )
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ENOTDIR) and cwd:
            reason = f"{reason} (working directory {cwd})"
        if isinstance(exc, OSError) and exc.errno == errno.E2BIG:
            # Linux takes at most 128 KiB in one argument, counted in bytes
            size = len(argument.encode("utf-8", "surrogateescape"))
            reason = (
                f"{reason} (the command is {size} bytes with the plugin's check before it; "
                f"one argument may hold {ARG_MAX_BYTES})"
            )
        raise SpawnError(f"cannot start the task: {reason}") from exc
    if nice > 0:
        set_group_nice(popen.pid, nice)
    return ChildProcess(popen, start_token(popen.pid, zombie_ok=True), log_dir)


@functools.cache
def _umask() -> str:
    """This process's umask in octal, for the wrapper to give back to the command."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return line.split()[1]
    except (OSError, IndexError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (once, at the first task)
    os.umask(mask)
    return f"{mask:04o}"


@functools.cache
def _detach_kwargs() -> dict[str, int | bool]:
    """How a task leaves the host's process group (Popen keywords).

    Neovim starts the host in a session of its own without a controlling
    terminal; a task then only needs a group of its own in that session: it
    still cannot open /dev/tty (a password prompt fails instead of hanging),
    and the tasks share the host's CPU group where the kernel shares CPU time
    by session, so a busy task does not weigh as much as the editor. With a
    terminal (or on Python < 3.11, without `process_group`) each task gets a
    session of its own."""
    if sys.version_info >= (3, 11) and not _has_controlling_terminal():
        return {"process_group": 0}
    return {"start_new_session": True}


def _has_controlling_terminal() -> bool:
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def set_group_nice(pgid: int, increment: int) -> None:
    """Make every process of group `pgid` `increment` steps nicer than this one."""
    try:
        value = min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment)
        os.setpriority(os.PRIO_PGRP, pgid, value)
    except (OSError, AttributeError) as exc:  # PermissionError is an OSError
        log.info("task group %d: cannot lower its priority: %s", pgid, exc)


AUTOGROUP = "/proc/self/autogroup"


def lower_own_session(nice: int) -> bool:
    """Give this process's session the scheduler priority of `nice` (0-19), when
    this process leads it (Neovim starts the host so). Where the kernel shares the
    CPU between sessions first (Linux autogroups), a task's own nice only ranks it
    against the host and the other tasks of the host's session: the session as a
    whole must yield for its tasks, all together, to leave the CPU to the editor.
    Where tasks get sessions of their own (a terminal, Python < 3.11), lowering
    this one would only make the host lose to them: nothing is done. True when
    set; a failure (no autogroups) is logged, never fatal."""
    if os.getsid(0) != os.getpid():
        return False  # another program's session (an MCP server an agent started): not ours
    if "process_group" not in _detach_kwargs():
        return False
    try:
        with open(AUTOGROUP, "w") as f:
            f.write(str(max(0, min(19, nice))))
    except OSError as exc:
        log.info("cannot set this session's scheduler priority: %s", exc)
        return False
    return True
