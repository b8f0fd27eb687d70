"""Engine knobs that are not user options (those are `config.TasksConfig`).
The defaults suit a user; tests shorten them so they never wait them out."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

# A JSON object of knobs to change, read by the host and the MCP server at start
# (tests set it so no test waits out a one-second tick).
ENV = "SIDEKICK_TOOLS_TUNING"


@dataclass(frozen=True)
class EngineTuning:
    # A running task's log is read (progress, line count) this often, from one
    # interval after it started: a shorter task is read once, at its exit.
    poll_interval: float = 1.0
    poll_max_bytes: int = 64 << 20  # read per task per tick, at most
    # Neovim exiting with kill_on_exit: SIGTERM, then SIGKILL this much later.
    exit_grace: float = 0.5
    purge_interval: float = 3600.0  # retention runs this often
    # At a task's exit, an unread log up to this many bytes is read before
    # "finished" (exact summary and line count); a larger one is summarized
    # from its tail and counted afterwards.
    full_scan_max: int = 8 << 20
    # ... and up to this many bytes it is read on the loop itself: for a short
    # task a worker thread costs more than the read.
    inline_read_max: int = 64 << 10
    # A task_output filter regex runs in a separate process killed after this.
    filter_time_limit: float = 2.0
    # A write the database's lock held back is retried after this, doubling.
    store_retry: float = 0.1
    # An adopted process (started by an earlier host) is looked at this often.
    adopted_poll_interval: float = 0.5
    # SQLite: how long an operation waits for another program's lock.
    busy_timeout: float = 0.05

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> EngineTuning:
        """The defaults, with the knobs `$SIDEKICK_TOOLS_TUNING` names."""
        raw = environ.get(ENV, "").strip()
        if not raw:
            return cls()
        try:
            knobs = json.loads(raw)
            defaults = cls()
            kinds = {f.name: type(getattr(defaults, f.name)) for f in dataclasses.fields(cls)}
            return cls(**{k: kinds[k](v) for k, v in knobs.items() if k in kinds})
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("ignoring %s=%r: %s", ENV, raw, exc)
            return cls()
