"""`SqliteStore`: tasks in `<state_dir>/tasks.db`, shared by every Neovim of the user.

WAL journal, short transactions, one connection per process. Several hosts
(one per Neovim) may use the file at once: token allocation runs inside
`BEGIN IMMEDIATE`, so two hosts never hand out the same token, and
`update(..., expect=...)` is a compare-and-set for the places where two hosts
could race (recovery, halting another instance's task). A lock held by another
program makes an operation fail after `busy_timeout` seconds with `StoreBusy`
instead of waiting: the engine's `BufferedStore` decides what to do meanwhile.

The writes are here; the file's opening, transactions and faults are in
`sqlite_connection`, the reads in `sqlite_reads`, the tables in `schema`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from typing import Any

from ..model import Task, TaskStatus, is_token
from . import sqlite_reads
from .base import Expect, Fields, Reserve, allocate_token, fields_to_write
from .errors import DuplicateToken
from .query import TaskQuery
from .schema import COLUMNS, column_of, to_db
from .sqlite_connection import DEFAULT_BUSY_TIMEOUT, connect, guarded, transaction

_INSERT = f"INSERT INTO tasks ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_OFFSET = "INSERT OR REPLACE INTO read_offsets (token, chat, offset) VALUES (?, ?, ?)"


class SqliteStore:
    """Tasks in an SQLite file shared by every Neovim instance of the user."""

    def __init__(self, path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.path = os.path.abspath(os.path.expanduser(path))
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = connect(self.path, busy_timeout)

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, for a `guarded` method (which checked it is open)."""
        assert self._conn is not None
        return self._conn

    # -- writing ----------------------------------------------------------------

    @guarded
    def insert(self, task: Task, reserve: Reserve | None = None) -> Task:
        """Store a new task and return a copy with its token.

        With an empty `task.id` a fresh token is allocated: inside one
        transaction a random token is checked against the table and against
        `reserve(candidate)` when given, then inserted; collisions retry with
        another token. An explicit `task.id` is inserted as is
        (`DuplicateToken` if taken).
        """
        task = task.copy()
        if task.id and not is_token(task.id):
            raise ValueError(f"invalid task token {task.id!r}")
        with transaction(self._db) as conn:

            def taken(token: str) -> bool:
                return conn.execute("SELECT 1 FROM tasks WHERE token = ?", (token,)).fetchone()

            if not task.id:
                allocate_token(task, taken, reserve)
            elif taken(task.id) or (reserve is not None and not reserve(task)):
                raise DuplicateToken(f"task token {task.id} is already in use")
            conn.execute(_INSERT, [to_db(c, task) for c in COLUMNS])
            self._write_offsets(conn, task)
            return task.copy()

    @guarded
    def insert_many(self, tasks: Iterable[Task]) -> None:
        """Bulk insert of tasks that already carry their tokens (one transaction)."""
        batch = list(tasks)
        offsets = [(t.id, chat, int(off)) for t in batch for chat, off in t.read_offsets.items()]
        try:
            with transaction(self._db) as conn:
                conn.executemany(_INSERT, ([to_db(c, t) for c in COLUMNS] for t in batch))
                conn.executemany(_OFFSET, offsets)
        except sqlite3.IntegrityError as exc:
            raise DuplicateToken(f"task database {self.path}: {exc}") from exc

    @staticmethod
    def _write_offsets(conn: sqlite3.Connection, task: Task) -> None:
        conn.executemany(_OFFSET, [(task.id, c, int(off)) for c, off in task.read_offsets.items()])

    @guarded
    def update(self, task: Task, fields: Fields = None, *, expect: Expect = None) -> bool:
        """Write `fields` of `task` (all fields when None); True if the row changed.

        `expect` maps field names to the values the stored row must still have
        (compare-and-set, e.g. `expect={"status": "running"}`); when they do
        not match, nothing is written and False is returned.
        """
        wanted, names = fields_to_write(fields)
        cols = [column_of(name) for name in names]
        where, params = ["token = ?"], [task.id]
        for name, value in (expect or {}).items():
            col = column_of(fields_to_write([name])[1][0])
            if value is None:
                where.append(f"{col} IS NULL")
            else:
                where.append(f"{col} = ?")
                params.append(TaskStatus(value).value if col == "status" else value)
        condition = " AND ".join(where)
        with transaction(self._db) as conn:
            if cols:
                sets = ", ".join(f"{c} = ?" for c in cols)
                cur = conn.execute(
                    f"UPDATE tasks SET {sets} WHERE {condition}",
                    [to_db(c, task) for c in cols] + params,
                )
                changed = cur.rowcount > 0
            else:
                found = conn.execute(f"SELECT 1 FROM tasks WHERE {condition}", params)
                changed = found.fetchone() is not None
            if changed and "read_offsets" in wanted:
                conn.execute("DELETE FROM read_offsets WHERE token = ?", (task.id,))
                self._write_offsets(conn, task)
            return changed

    @guarded
    def delete(self, token: str) -> bool:
        with transaction(self._db) as conn:
            cur = conn.execute("DELETE FROM tasks WHERE token = ?", (token,))
            conn.execute("DELETE FROM read_offsets WHERE token = ?", (token,))
            return cur.rowcount > 0

    @guarded
    def purge(self, now: float, completed: float, failed: float) -> list[str]:
        """Delete finished tasks past retention (see `base.purgeable`): completed ones
        after `completed` seconds, failed and cancelled after `failed`; their tokens."""
        sql = """
            SELECT token FROM tasks
            WHERE status = ? AND coalesce(ended_at, created_at) < ?
              AND (result_read = 1 OR coalesce(ended_at, created_at) < ?)
        """
        with transaction(self._db) as conn:
            tokens: list[str] = []
            for st, keep in (
                (TaskStatus.COMPLETED, completed),
                (TaskStatus.FAILED, failed),
                (TaskStatus.CANCELLED, failed),
            ):
                rows = conn.execute(sql, (st.value, now - keep, now - 2 * keep)).fetchall()
                tokens.extend(r[0] for r in rows)
            for start in range(0, len(tokens), 500):  # stay under SQLite's variable limit
                chunk = tokens[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                conn.execute(f"DELETE FROM tasks WHERE token IN ({marks})", chunk)
                conn.execute(f"DELETE FROM read_offsets WHERE token IN ({marks})", chunk)
            return tokens

    def _flag(self, token: str, column: str) -> bool:
        cur = self._db.execute(f"UPDATE tasks SET {column} = 1 WHERE token = ?", (token,))
        return cur.rowcount > 0

    @guarded
    def mark_read(self, token: str) -> bool:
        return self._flag(token, "result_read")

    @guarded
    def mark_delivered(self, token: str) -> bool:
        """The call's result is in the chat: after a crash it is adopted, never run again."""
        return self._flag(token, "delivered")

    @guarded
    def set_read_offset(self, token: str, chat: str, offset: int) -> None:
        self._db.execute(_OFFSET, (token, chat, int(offset)))

    # -- reading ----------------------------------------------------------------

    @guarded
    def get_read_offset(self, token: str, chat: str) -> int:
        return sqlite_reads.read_offset(self._db, token, chat)

    @guarded
    def get(self, token: str) -> Task | None:
        return sqlite_reads.get(self._db, token)

    @guarded
    def find_by_call(self, chat: str, call_id: str) -> Task | None:
        """The newest task started by call `call_id` of `chat`, if any (indexed)."""
        return sqlite_reads.find_by_call(self._db, chat, call_id)

    @guarded
    def list(self, query: TaskQuery, limit: int | None = 100, offset: int = 0) -> list[Task]:
        """Tasks newest first, a page at the cost of an index walk (`sqlite_reads.page`)."""
        return sqlite_reads.page(self._db, query, limit, offset)

    @guarded
    def count(self, query: TaskQuery) -> int:
        return sqlite_reads.count(self._db, query)

    @guarded
    def explain(self, sql: str, params: Iterable[Any] = ()) -> str:
        """The query plan of `sql` (diagnostics and tests)."""
        rows = self._db.execute(f"EXPLAIN QUERY PLAN {sql}", list(params))
        return "\n".join(str(r[-1]) for r in rows)

    def explain_list(self, query: TaskQuery) -> str:
        """The query plan `list()` uses for `query`'s owner and first status."""
        return self.explain(*sqlite_reads.first_scan(query))

    def pragma(self, name: str) -> Any:
        """The value of `PRAGMA name` on this connection (diagnostics and tests)."""
        with self._lock:
            assert self._conn is not None
            return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["SqliteStore"]
