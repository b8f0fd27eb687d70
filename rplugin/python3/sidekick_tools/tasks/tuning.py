"""Engine knobs that are not user options (those are `config.TasksConfig`).
The defaults suit a user; tests shorten them so they never wait them out."""

from __future__ import annotations

from dataclasses import dataclass


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
