"""The state directory (0700) and the log file in it (0600), shared by the
Neovim host and the MCP server. A state directory that cannot be written (a
read-only mount, a full disk) is replaced by a private temporary one, so the
host keeps working: tasks in memory, logs there."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class StateDir:
    path: str  # where the database, the task logs and the log file go
    problem: str | None = None  # why the configured directory is not `path`
    told: bool = False  # the user was told already (setup() named `path`)

    def explain(self) -> str:
        """The one message the user gets about a replaced state directory."""
        return (
            f"sidekick_tools: the state directory {self.problem}: tasks are kept in memory "
            f"for this session, and their logs go to {self.path}"
        )


def prepare_state_dir(path: str) -> None:
    """`path` made (0700), or made 0700 if it is ours; one of another user is
    left as it is (PermissionError): not even root changes its mode."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.stat(path).st_uid != os.getuid():
        raise PermissionError(errno.EPERM, "owned by another user")
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)


def _prove_writable(path: str) -> None:
    """`path` created 0700, ours, and a file made in it; OSError when not. A
    folder another user made (a shared /tmp path in the config, made first by
    them) would let them read, replace or plant the logs and the database."""
    prepare_state_dir(path)
    fd, probe = tempfile.mkstemp(dir=path, prefix=".writable-")
    os.close(fd)
    os.unlink(probe)


def open_state_dir(path: str, fallback: str | None = None) -> StateDir:
    """`path`, created 0700 and proven writable; else ``fallback`` (the
    temporary directory setup() already named to the user, see config.lua's
    `state_fallback`) when it is usable, else a fresh 0700 directory under the
    temporary directory; with the reason."""
    try:
        _prove_writable(path)
        return StateDir(path)
    except OSError as exc:
        problem = f"{path} is unusable ({exc.strerror or exc})"
    if fallback and _ours(fallback):
        try:
            _prove_writable(fallback)
            return StateDir(fallback, problem, told=True)
        except OSError:
            pass
    return StateDir(tempfile.mkdtemp(prefix="sidekick_tools-"), problem)


def _ours(path: str) -> bool:
    """A directory of ours alone: not a symlink, owned by this user, and open
    to no one else (the temporary directory setup() made could have been
    removed by a cleaner and made again by another user meanwhile)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def log_to_file(path: str) -> None:
    """Send the package's log records to ``path`` (once per process); a file
    that cannot be opened leaves logging to stderr alone."""
    root = logging.getLogger("sidekick_tools")
    if any(isinstance(h, logging.FileHandler) for h in root.handlers):
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        handler = logging.FileHandler(path)
    except OSError:
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(os.environ.get("SIDEKICK_TOOLS_LOG_LEVEL", "INFO"))
