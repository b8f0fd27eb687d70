"""The task database's tables, how a row maps to a `Task`, and how a file of an
older version is brought up to date. A file of a newer version is never
written to (`check_version`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..model import Task, TaskStatus

SCHEMA_VERSION = 3

# Columns of the `tasks` table, in `Task` field order (token == Task.id), but
# for call_command: version 3 added it, last.
COLUMNS = (
    "token",
    "tool",
    "label",
    "command",
    "cwd",
    "env",
    "status",
    "reason",
    "exit_code",
    "pid",
    "pid_start",
    "owner",
    "chat",
    "call_id",
    "created_at",
    "started_at",
    "ended_at",
    "timeout",
    "progress",
    "progress_text",
    "lines",
    "log_dir",
    "summary",
    "error",
    "result_read",
    "delivered",
    "call_command",
)

TABLES = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY,
    token TEXT NOT NULL UNIQUE,
    tool TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL DEFAULT '',
    command TEXT NOT NULL DEFAULT '',
    cwd TEXT NOT NULL DEFAULT '',
    env TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,
    reason TEXT,
    exit_code INTEGER,
    pid INTEGER,
    pid_start TEXT,
    owner TEXT NOT NULL DEFAULT '',
    chat TEXT NOT NULL DEFAULT '',
    call_id TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    timeout REAL,
    progress INTEGER,
    progress_text TEXT,
    lines INTEGER NOT NULL DEFAULT 0,
    log_dir TEXT NOT NULL DEFAULT '',
    summary TEXT,
    error TEXT,
    result_read INTEGER NOT NULL DEFAULT 0,
    delivered INTEGER NOT NULL DEFAULT 0,
    call_command TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS tasks_created ON tasks (created_at);
CREATE INDEX IF NOT EXISTS tasks_status_created ON tasks (status, created_at);
CREATE INDEX IF NOT EXISTS tasks_owner_created ON tasks (owner, created_at);
CREATE INDEX IF NOT EXISTS tasks_owner_status_created ON tasks (owner, status, created_at);
CREATE INDEX IF NOT EXISTS tasks_status_ended ON tasks (status, ended_at);
CREATE INDEX IF NOT EXISTS tasks_chat_created ON tasks (chat, created_at);
CREATE INDEX IF NOT EXISTS tasks_chat_call ON tasks (chat, call_id);
CREATE TABLE IF NOT EXISTS read_offsets (
    token TEXT NOT NULL,
    chat TEXT NOT NULL,
    offset INTEGER NOT NULL,
    PRIMARY KEY (token, chat)
) WITHOUT ROWID;
"""

# version N -> the statements that turn a version-N file into version N + 1
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # v2: the call layer's "result written into the chat" flag, and finding
        # the task of a call (exactly once after a crash)
        "ALTER TABLE tasks ADD COLUMN delivered INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS tasks_chat_call ON tasks (chat, call_id)",
    ),
    2: (
        # v3: the command as the call wrote it, which lists show, when the host
        # ran a checked and hardened form of it (auto-run)
        "ALTER TABLE tasks ADD COLUMN call_command TEXT NOT NULL DEFAULT ''",
    ),
}


BOOLEAN_COLUMNS = ("result_read", "delivered")


def column_of(field: str) -> str:
    """The column that stores a `Task` field."""
    return "token" if field == "id" else field


def to_db(column: str, task: Task) -> Any:
    """`task`'s value for `column`, as SQLite stores it."""
    if column == "token":
        return task.id
    value = getattr(task, column)
    if column == "env":
        return json.dumps(value or {}, sort_keys=True)
    if column == "status":
        return TaskStatus(value).value
    if column in BOOLEAN_COLUMNS:
        return 1 if value else 0
    return value


def from_row(row: sqlite3.Row | tuple) -> Task:
    """The `Task` a row of COLUMNS holds."""
    values = dict(zip(COLUMNS, row))
    values["id"] = values.pop("token")
    values["env"] = json.loads(values["env"] or "{}")
    for name in BOOLEAN_COLUMNS:
        values[name] = bool(values[name])
    return Task(**values)


class NewerSchema(ValueError):
    """The file was written by a newer sidekick-tools."""


def stored_version(conn: sqlite3.Connection) -> int | None:
    """The file's schema version (None: no task tables yet). Reads only."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if row is None:
        return None
    return conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]


def check_version(conn: sqlite3.Connection) -> int | None:
    """`stored_version`, refusing a newer one (NewerSchema) before anything is written."""
    version = stored_version(conn)
    if version is not None and version > SCHEMA_VERSION:
        raise NewerSchema(
            f"schema version {version} was written by a newer sidekick-tools "
            f"(this one knows {SCHEMA_VERSION}); the file was left as it is"
        )
    return version


def bring_up_to_date(conn: sqlite3.Connection) -> None:
    """Create the tables, or migrate an older file; inside the caller's write
    transaction, so two hosts opening the file at once migrate it once."""
    version = check_version(conn)
    if version is None:
        for statement in TABLES.split(";"):  # not executescript(): it would COMMIT first
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        return
    while version < SCHEMA_VERSION:
        for statement in MIGRATIONS[version]:
            conn.execute(statement)
        version += 1
        conn.execute("UPDATE schema_version SET version = ?", (version,))
