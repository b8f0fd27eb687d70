"""BufferedStore: the engine never waits on the database, and never loses a write.

Real SQLite files; "another program" is a second connection holding the lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

import pytest
from sidekick_tools.tasks.model import Task, TaskStatus
from sidekick_tools.tasks.store import (
    EVERY_TASK,
    BufferedStore,
    MemoryStore,
    SqliteStore,
    StoreBusy,
    StoreError,
    TaskQuery,
)

from tests.conftest import until

S = TaskStatus
Q = TaskQuery.of
ALL = EVERY_TASK


def mk(**kw) -> Task:
    kw.setdefault("tool", "run_terminal_command")
    kw.setdefault("command", "true")
    kw.setdefault("created_at", time.time())
    return Task(**kw)


class Holder:
    """Another program with a write transaction open on the database."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.conn.close()


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "tasks.db")


@pytest.fixture
def store(db) -> Iterator[BufferedStore]:
    s = BufferedStore(SqliteStore(db, busy_timeout=0.01), retry_first=0.01)
    yield s
    s.close()


def status_in_file(db: str, token: str) -> str:
    """What the file says now (a reader: works while another program writes)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT status FROM tasks WHERE token = ?", (token,)).fetchone()[0]
    finally:
        conn.close()


def stored(db: str, token: str) -> Task | None:
    reader = SqliteStore(db)
    try:
        return reader.get(token)
    finally:
        reader.close()


def test_the_hosts_own_tasks_are_written_behind_a_lock(store: BufferedStore, db: str) -> None:
    other = store.insert(mk(owner="someone else", created_at=1.0))  # not ours: not tracked
    mine = store.insert(mk(owner="me", status=S.RUNNING, created_at=2.0))
    store.track(mine)
    holder = Holder(db)
    try:
        mine.status, mine.exit_code, mine.summary = S.COMPLETED, 0, "done"
        assert store.update(mine, ["status", "exit_code", "summary"], expect={"status": "running"})
        store.mark_read(mine.id)
        store.set_read_offset(mine.id, "chat", 7)
        later = store.insert(mk(owner="me", created_at=3.0))  # the token is allocated here
        store.track(later)
        assert store.pending_writes == 4
        # the host answers for its own tasks from what it holds
        got = store.get(mine.id)
        assert got.status is S.COMPLETED and got.summary == "done" and got.result_read
        assert store.get_read_offset(mine.id, "chat") == 7
        assert [t.id for t in store.list(Q(owner="me"), limit=None)] == [later.id, mine.id]
        assert store.count(Q(owner="me")) == 2 and store.count(Q(S.COMPLETED, owner="me")) == 1
        # a compare-and-set that the host's record refuses is refused at once
        mine.status = S.FAILED
        assert not store.update(mine, ["status"], expect={"status": "running"})
        # another instance's task is read from the file (WAL readers are not blocked)...
        assert store.get(other.id).owner == "someone else"
        # ...but only the database may decide a write to it: refused at once
        other.status = S.CANCELLED
        with pytest.raises(StoreBusy, match="locked"):
            store.update(other, ["status"], expect={"status": "queued"})
        assert status_in_file(db, mine.id) == "running"  # nothing landed yet
    finally:
        holder.release()
    assert store.flush() and store.pending_writes == 0
    landed = stored(db, mine.id)
    assert landed.status is S.COMPLETED and landed.exit_code == 0 and landed.result_read
    assert landed.read_offsets == {"chat": 7}
    assert stored(db, later.id).owner == "me"
    assert stored(db, other.id).status is S.QUEUED


async def test_queued_writes_land_by_themselves_once_the_lock_is_gone(store, db) -> None:
    mine = store.insert(mk(status=S.RUNNING))
    store.track(mine)
    holder = Holder(db)
    mine.status = S.COMPLETED
    assert store.update(mine, ["status"])
    assert store.pending_writes == 1
    holder.release()
    await until(lambda: store.pending_writes == 0)
    assert stored(db, mine.id).status is S.COMPLETED


def test_reads_of_unknown_tasks_fail_at_once_while_reading_is_blocked(db) -> None:
    backend = _BusyReads(db)
    mine = backend.insert(mk(owner="me", status=S.RUNNING))
    blocked = BufferedStore(backend, retry_first=60)
    blocked.track(mine)
    try:
        with pytest.raises(StoreBusy, match="locked"):
            blocked.get("abcdef")
        assert backend.reads == 1
        # the circuit is open: the file is not asked again, the host's own tasks answer
        with pytest.raises(StoreBusy):
            blocked.get("abcdef")
        assert blocked.get(mine.id).owner == "me"
        assert [t.id for t in blocked.list(ALL, limit=None)] == [mine.id]
        assert blocked.count(ALL) == 1 and blocked.count(Q(S.QUEUED)) == 0
        assert backend.reads == 1
    finally:
        blocked.close()


class _BusyReads(SqliteStore):
    """A database whose reads find it locked (another program's exclusive mode)."""

    reads = 0

    def get(self, token: str) -> Task | None:
        self.reads += 1
        raise StoreBusy(f"task database {self.path} is locked by another program")

    list = count = get  # type: ignore[assignment]


def test_a_queued_write_that_lost_the_race_keeps_their_verdict(store, db) -> None:
    seen: list[Task] = []
    store.on_conflict = seen.append
    mine = store.insert(mk(status=S.RUNNING))
    store.track(mine)
    holder = Holder(db)
    mine.status, mine.exit_code, mine.summary = S.FAILED, 143, "partial"
    assert store.update(mine, ["status", "exit_code", "summary"], expect={"status": "running"})
    # the other program halted it meanwhile (it holds the lock, so it could)
    holder.conn.execute(
        "UPDATE tasks SET status = 'cancelled', reason = 'cancelled' WHERE token = ?", (mine.id,)
    )
    holder.release()
    assert store.flush()
    landed = stored(db, mine.id)
    assert landed.status is S.CANCELLED and landed.exit_code == 143
    assert landed.summary == "partial"
    assert [t.status for t in seen] == [S.CANCELLED]
    assert store.get(mine.id).status is S.CANCELLED


class _FullDisk(SqliteStore):
    """A database whose writes start failing (a full disk) once `full` is set."""

    full = False

    def update(self, *args, **kwargs) -> bool:
        if self.full:
            raise StoreError(f"task database {self.path}: database or disk is full")
        return super().update(*args, **kwargs)


def test_a_database_that_stops_taking_writes_is_replaced_by_memory(db) -> None:
    told: list[str] = []
    backend = _FullDisk(db)
    store = BufferedStore(backend, on_fallback=told.append)
    old = store.insert(mk(owner="someone else", status=S.COMPLETED, created_at=1.0))
    store.set_read_offset(old.id, "chat", 3)
    mine = store.insert(mk(owner="me", status=S.RUNNING, created_at=2.0))
    store.track(mine)
    backend.full = True
    mine.status, mine.exit_code = S.FAILED, 1
    assert store.update(mine, ["status", "exit_code"], expect={"status": "running"})
    assert isinstance(store.backend, MemoryStore)
    assert len(told) == 1 and "disk is full" in told[0] and "memory" in told[0]
    # everything known so far is kept, the new status included
    assert store.get(mine.id).status is S.FAILED and store.get(mine.id).exit_code == 1
    assert store.get(old.id).status is S.COMPLETED
    assert store.get_read_offset(old.id, "chat") == 3
    assert {t.id for t in store.list(ALL, limit=None)} == {old.id, mine.id}
    newer = store.insert(mk(owner="me"))
    assert store.get(newer.id) is not None and len(told) == 1
    store.close()
