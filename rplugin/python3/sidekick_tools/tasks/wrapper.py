"""The shell wrapper every task runs under, and what it leaves behind.

Every task runs as

    /bin/sh -c WRAPPER sidekick-task COMMAND LOG_DIR UMASK [TASK_ID]

in its own process group (pgid == the wrapper's pid; `spawn.spawn` starts it),
stdin /dev/null, no controlling terminal. The wrapper (the task's *supervisor*):

- opens `LOG_DIR/stdout` and `LOG_DIR/stderr` for appending under umask 077
  (0600), then gives the command the host's UMASK back. The wrapper creates
  them, not the host, so many tasks starting at once do not queue behind the
  host's one thread; appending, never truncating, spares the command a flush
  of the whole file at its exit (ext4's auto_da_alloc). A log not there yet
  reads as empty. Output never passes through Python.
- traps TERM/HUP/INT with a handler (not `trap ''`, which the command would
  inherit as "ignored"), so it outlives the command and records its exit;
- runs the command (`guarded`) only when `LOG_DIR/halt` is not there: a halt
  writes it before the group's SIGTERM, which misses a command not started yet
  (or forked and not yet exec'd, when the wrapper's handler takes it and the
  exec drops it): halted right after it started, a command went on doing its
  work until the SIGKILL after the grace;
- writes `LOG_DIR/exit` with one builtin `printf` (no extra process per task):
  `code=`, `signal=`, `ended=`. A record without its final `ended=` line and
  newline is still being written and reads as absent. When it cannot be
  written (a full disk) the host still learns the exit as the wrapper's parent.

See bench/ANALYSIS.md for how these choices were measured.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from .identity import start_token

WRAPPER = r"""trap 'sk_sig=15' TERM
trap 'sk_sig=1' HUP
trap 'sk_sig=2' INT
umask 077
exec 3>>"$2/stdout" 4>>"$2/stderr"
umask "$3"
if [ -n "${4:-}" ]; then export SIDEKICK_TASK_ID="$4"; fi
/bin/sh -c "$1" </dev/null >&3 2>&4 3>&- 4>&-
sk_rc=$?
umask 077
printf 'code=%s\nsignal=%s\nended=%s\n' "$sk_rc" "${sk_sig:-0}" "${EPOCHREALTIME:-}" >"$2/exit"
exit "$sk_rc"
"""

SUPERVISOR_NAME = "sidekick-task"
HALT = "halt"  # in LOG_DIR: the task was halted (written before its SIGTERM)


def guarded(command: str, log_dir: str) -> str:
    """`command` as the wrapper runs it: first, in the command's own shell (after
    its exec: a SIGTERM from then on reaches it), a look for the halt file. On
    the command's first line, and `$?` is 0 after it, so nothing the command
    sees of its script changes."""
    halt = shlex.quote(os.path.join(log_dir, HALT))
    return f"if [ -e {halt} ]; then exit 143; fi; {command}"


def mark_halted(log_dir: str) -> None:
    """Write the halt file (`guarded`); a log folder gone or full is no matter."""
    try:
        os.close(os.open(os.path.join(log_dir, HALT), os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        pass


@dataclass(frozen=True)
class ExitRecord:
    """What the supervisor wrote to LOG_DIR/exit."""

    code: int  # the command's exit status (128+N when killed by signal N)
    signal: int  # signal the supervisor itself received (0: none)
    ended_at: float


def read_exit(log_dir: str) -> ExitRecord | None:
    """The supervisor's exit record; None while there is no complete one."""
    try:
        with open(os.path.join(log_dir, "exit")) as f:
            st = os.fstat(f.fileno())
            text = f.read()
    except OSError:
        return None
    if not text.endswith("\n") or not text.splitlines()[-1].startswith("ended="):
        return None  # absent or still being written
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    try:
        code = int(values["code"])
    except (KeyError, ValueError):
        return None
    try:
        sig = int(values.get("signal") or 0)
    except ValueError:
        sig = 0
    try:
        ended = float(values.get("ended", "").replace(",", "."))
    except ValueError:
        ended = st.st_mtime  # the wrapper's shell had no clock: the file's mtime is the end
    return ExitRecord(code, sig, ended)


def find_supervisor(log_dir: str) -> tuple[int, str] | None:
    """The live supervisor wrapper writing into `log_dir` (pid, start token), if any.

    For a task whose start never reached the store (its host was killed between
    spawning the wrapper and saving its pid): the wrapper names its log dir in
    its argv, and only a wrapper of ours has SUPERVISOR_NAME as its $0. Linux
    only (/proc); elsewhere such a task is reported as lost, never run again.
    """
    if not os.path.isdir("/proc/self"):
        return None
    want = os.fsencode(log_dir)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # /bin/sh -c WRAPPER sidekick-task COMMAND LOG_DIR UMASK [TASK_ID]
        if len(argv) > 5 and argv[3] == SUPERVISOR_NAME.encode() and argv[5] == want:
            token = start_token(int(entry))
            if token:
                return int(entry), token
    return None
