"""Reading tasks from the task database: one by token or by call, a page newest
first, a count, the read offsets. Every function takes the open connection (the
caller holds its lock)."""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections.abc import Iterable
from typing import Any, Optional

from ..model import Task
from .query import TaskQuery, prefix_bounds
from .schema import COLUMNS, from_row

_CREATED_AT = COLUMNS.index("created_at")
_TOKEN = COLUMNS.index("token")
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM tasks"

_PREFIX = "chat >= ? AND chat < ?"  # the chats named with a prefix (`prefix_bounds`)

Scope = Optional[tuple[str, str]]  # ("owner" | "chat" | "prefix", value); None: every task


def _scopes(query: TaskQuery) -> list[Scope]:
    """The index scans that together select the owner's tasks, the chats'
    tasks and those of the chats named with the prefix."""
    scopes: list[Scope] = []
    if query.owner is not None:
        scopes.append(("owner", query.owner))
    for chat in sorted(query.chats):
        scopes.append(("chat", chat))
    if query.chat_prefix is not None:
        scopes.append(("prefix", query.chat_prefix))
    return scopes or [None]


def _where(scope: Scope, status: str | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if scope is not None and scope[0] == "prefix":
        where.append(_PREFIX)
        params.extend(prefix_bounds(scope[1]))
    elif scope is not None:
        where.append(f"{scope[0]} = ?")
        params.append(scope[1])
    if status is not None:
        where.append("status = ?")
        params.append(status)
    return where, params


def _unique_rows(rows: Iterable[tuple]) -> Iterable[tuple]:
    """Rows without repeats (a task may be both the owner's and an open chat's)."""
    seen: set[str] = set()
    for row in rows:
        if row[_TOKEN] not in seen:
            seen.add(row[_TOKEN])
            yield row


def read_offset(conn: sqlite3.Connection, token: str, chat: str) -> int:
    row = conn.execute(
        "SELECT offset FROM read_offsets WHERE token = ? AND chat = ?", (token, chat)
    ).fetchone()
    return int(row[0]) if row else 0


def get(conn: sqlite3.Connection, token: str) -> Task | None:
    return _one(conn, f"{_SELECT} WHERE token = ?", (token,))


def find_by_call(conn: sqlite3.Connection, chat: str, call_id: str) -> Task | None:
    """The newest task started by call `call_id` of `chat`, if any (indexed)."""
    sql = f"{_SELECT} WHERE chat = ? AND call_id = ? ORDER BY created_at DESC, seq DESC"
    return _one(conn, sql + " LIMIT 1", (chat, call_id))


def _one(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Task | None:
    row = conn.execute(sql, params).fetchone()
    if row is None:
        return None
    task = from_row(row)
    _attach_offsets(conn, [task])
    return task


def _attach_offsets(conn: sqlite3.Connection, tasks: list[Task]) -> None:
    by_token = {t.id: t for t in tasks}
    tokens = list(by_token)
    for i in range(0, len(tokens), 500):  # stay under SQLite's variable limit
        chunk = tokens[i : i + 500]
        marks = ", ".join("?" * len(chunk))
        for token, chat, off in conn.execute(
            f"SELECT token, chat, offset FROM read_offsets WHERE token IN ({marks})", chunk
        ):
            by_token[token].read_offsets[chat] = int(off)


def _select(
    conn: sqlite3.Connection, where: list[str], params: list[Any], limit: int | None, offset: int
) -> list[tuple]:
    sql = f"SELECT {', '.join(COLUMNS)}, seq FROM tasks"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_at DESC, seq DESC"
    if limit is not None:
        sql += " LIMIT ? OFFSET ?"
        params = params + [int(limit), int(offset)]
    elif offset:
        sql += " LIMIT -1 OFFSET ?"
        params = params + [int(offset)]
    return conn.execute(sql, params).fetchall()


def page(conn: sqlite3.Connection, query: TaskQuery, limit: int | None, offset: int) -> list[Task]:
    """Tasks newest first (by `created_at`, then insertion order).

    Every query walks an index in order and stops after `offset + limit`
    rows, so a page costs the same with 100 or 100,000 stored tasks.
    Several statuses, or an owner with chats, are answered by merging one
    indexed query per (status, owner or chat).
    """
    scopes = _scopes(query)
    status_list: list[str | None] = sorted(query.statuses) if query.statuses else [None]
    upto = None if limit is None else offset + limit
    if len(scopes) * len(status_list) == 1:
        where, params = _where(scopes[0], status_list[0])
        rows = _select(conn, where, params, limit, offset)
    else:
        streams = [
            _select(conn, *_where(scope, st), upto, 0) for scope in scopes for st in status_list
        ]
        merged = heapq.merge(*streams, key=lambda r: (r[_CREATED_AT], r[-1]), reverse=True)
        rows = list(itertools.islice(_unique_rows(merged), offset, upto))
    tasks = [from_row(r[:-1]) for r in rows]
    if tasks:
        _attach_offsets(conn, tasks)
    return tasks


def count(conn: sqlite3.Connection, query: TaskQuery) -> int:
    where, params, scope = [], [], []
    if query.owner is not None:
        scope.append("owner = ?")
        params.append(query.owner)
    chat_list = sorted(query.chats)
    if chat_list:
        scope.append(f"chat IN ({', '.join('?' * len(chat_list))})")
        params.extend(chat_list)
    if query.chat_prefix is not None:
        scope.append(f"({_PREFIX})")
        params.extend(prefix_bounds(query.chat_prefix))
    if scope:
        where.append("(" + " OR ".join(scope) + ")")
    if query.statuses is not None:
        where.append(f"status IN ({', '.join('?' * len(query.statuses))})")
        params.extend(sorted(query.statuses))
    sql = "SELECT count(*) FROM tasks" + (" WHERE " + " AND ".join(where) if where else "")
    return int(conn.execute(sql, params).fetchone()[0])


def first_scan(query: TaskQuery) -> tuple[str, list[Any]]:
    """The statement `page` runs for `query`'s owner and first status (for its plan)."""
    status = sorted(query.statuses)[0] if query.statuses else None
    scope = None if query.owner is None else ("owner", query.owner)
    where, params = _where(scope, status)
    sql = f"{_SELECT}{' WHERE ' + ' AND '.join(where) if where else ''}"
    return sql + " ORDER BY created_at DESC, seq DESC LIMIT 50", params
