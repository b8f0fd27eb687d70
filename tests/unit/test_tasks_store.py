from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator

import pytest
from sidekick_tools.tasks.model import Task, TaskStatus, is_token
from sidekick_tools.tasks.store import (
    EVERY_TASK,
    BufferedStore,
    DuplicateToken,
    MemoryStore,
    SqliteStore,
    StoreError,
    TaskQuery,
    TaskStore,
    open_store,
)
from sidekick_tools.tasks.store.schema import MIGRATIONS

S = TaskStatus
Q = TaskQuery.of
ALL = EVERY_TASK
DAY = 86400.0


@pytest.fixture(params=["sqlite", "memory", "buffered"])
def tasks_store(request: pytest.FixtureRequest, tmp_path) -> Iterator[TaskStore]:
    """Every store behaves the same; the engine's BufferedStore over SQLite too."""
    store: TaskStore
    if request.param == "sqlite":
        store = SqliteStore(str(tmp_path / "state" / "tasks.db"))
    elif request.param == "buffered":
        store = BufferedStore(SqliteStore(str(tmp_path / "state" / "tasks.db")))
    else:
        store = MemoryStore()
    yield store
    store.close()


def mk(**kw) -> Task:
    kw.setdefault("tool", "run_terminal_command")
    kw.setdefault("command", "true")
    kw.setdefault("created_at", time.time())
    return Task(**kw)


def test_insert_allocates_token_and_get_returns_copies(tasks_store: TaskStore) -> None:
    t = tasks_store.insert(mk(label="x", env={"A": "1"}))
    assert is_token(t.id)
    got = tasks_store.get(t.id)
    assert got == t
    got.label = "changed"
    got.env["B"] = "2"
    assert tasks_store.get(t.id).label == "x"
    assert tasks_store.get(t.id).env == {"A": "1"}
    other = "ffffff" if t.id != "ffffff" else "eeeeee"
    assert tasks_store.get(other) is None


def test_explicit_token_and_duplicates(tasks_store: TaskStore) -> None:
    tasks_store.insert(mk(id="abc123"))
    with pytest.raises(DuplicateToken):
        tasks_store.insert(mk(id="abc123"))
    with pytest.raises(ValueError):
        tasks_store.insert(mk(id="NOT-A-TOKEN"))


def test_reserve_callback_can_refuse_and_fill_fields(tasks_store: TaskStore) -> None:
    refused: list[str] = []

    def reserve(candidate: Task) -> bool:
        if len(refused) < 3:
            refused.append(candidate.id)
            return False
        candidate.log_dir = f"/logs/{candidate.id}"
        return True

    t = tasks_store.insert(mk(), reserve=reserve)
    assert len(refused) == 3
    assert t.log_dir == f"/logs/{t.id}"
    assert tasks_store.get(t.id).log_dir == t.log_dir


def test_tokens_unique_when_many_allocated(tasks_store: TaskStore) -> None:
    tokens = {tasks_store.insert(mk()).id for _ in range(2000)}
    assert len(tokens) == 2000
    assert tasks_store.count(ALL) == 2000


def test_update_only_given_fields(tasks_store: TaskStore) -> None:
    t = tasks_store.insert(mk(label="one"))
    t.label = "two"
    t.progress = 40
    assert tasks_store.update(t, ["progress"])
    got = tasks_store.get(t.id)
    assert got.progress == 40 and got.label == "one"
    assert tasks_store.update(t)  # all fields
    assert tasks_store.get(t.id).label == "two"
    with pytest.raises(ValueError):
        tasks_store.update(t, ["no_such_field"])
    assert not tasks_store.update(mk(id="eeeeee"), ["label"])


def test_update_compare_and_set(tasks_store: TaskStore) -> None:
    t = tasks_store.insert(mk(owner="a"))
    t.status = S.RUNNING
    assert tasks_store.update(t, ["status"], expect={"status": "queued", "owner": "a"})
    t.status = S.CANCELLED
    assert not tasks_store.update(t, ["status"], expect={"status": "queued"})
    assert tasks_store.get(t.id).status is S.RUNNING
    assert not tasks_store.update(t, ["status"], expect={"owner": "b"})
    assert tasks_store.update(t, ["status"], expect={"status": S.RUNNING, "pid": None})
    assert tasks_store.get(t.id).status is S.CANCELLED


def test_list_newest_first_with_filters(tasks_store: TaskStore) -> None:
    base = 1000.0
    made = []
    statuses = [S.QUEUED, S.RUNNING, S.COMPLETED, S.FAILED, S.CANCELLED]
    for i in range(25):
        t = tasks_store.insert(
            mk(created_at=base + i, status=statuses[i % 5], owner="me" if i % 2 else "you")
        )
        made.append(t)
    ids_newest = [t.id for t in reversed(made)]
    assert [t.id for t in tasks_store.list(ALL, limit=None)] == ids_newest
    assert [t.id for t in tasks_store.list(ALL, limit=5, offset=5)] == ids_newest[5:10]
    assert [t.id for t in tasks_store.list(Q("all"), limit=3)] == ids_newest[:3]
    running = tasks_store.list(Q("running"))
    assert [t.id for t in running] == [t.id for t in reversed(made) if t.status is S.RUNNING]
    ended = tasks_store.list(Q({"failed", S.CANCELLED}), limit=4, offset=1)
    expected = [t.id for t in reversed(made) if t.status in (S.FAILED, S.CANCELLED)]
    assert [t.id for t in ended] == expected[1:5]
    mine = tasks_store.list(Q(S.COMPLETED, owner="me"))
    assert [t.id for t in mine] == [
        t.id for t in reversed(made) if t.owner == "me" and t.status is S.COMPLETED
    ]
    assert tasks_store.count(ALL) == 25
    assert tasks_store.count(Q("running")) == 5
    assert tasks_store.count(Q({S.FAILED, S.CANCELLED})) == 10
    assert tasks_store.count(Q(owner="me")) == 12
    assert tasks_store.count(Q(S.QUEUED, owner="you")) == 3


def test_a_chat_prefix_selects_the_chats_named_so(tasks_store: TaskStore) -> None:
    """The MCP face's tasks (chats "mcp:<client>") among any others: listed
    newest first and counted by the store, by status, alone or with an owner."""
    chats = ["mcp:agent", "/w/a.sidekick.md", "mcp:other", "mcp", "mcq:x", "mcp:"]
    made = [
        tasks_store.insert(mk(created_at=100.0 + i, chat=chats[i % 6], owner=f"o{i % 2}"))
        for i in range(24)
    ]
    mcp = [t.id for t in reversed(made) if t.chat.startswith("mcp:")]
    query = TaskQuery.of(chat_prefix="mcp:")
    assert [t.id for t in tasks_store.list(query, limit=None)] == mcp
    assert [t.id for t in tasks_store.list(query, limit=3, offset=2)] == mcp[2:5]
    assert tasks_store.count(query) == len(mcp) == 12
    assert tasks_store.count(TaskQuery.of(S.RUNNING, chat_prefix="mcp:")) == 0
    either = TaskQuery.of(owner="o1", chat_prefix="mcp:")
    want = [t.id for t in reversed(made) if t.chat.startswith("mcp:") or t.owner == "o1"]
    assert [t.id for t in tasks_store.list(either, limit=None)] == want
    assert tasks_store.count(either) == len(want)


def test_owner_or_open_chats_scope(tasks_store: TaskStore) -> None:
    """This Neovim's tasks: its own, and those of the chats open in it (started
    by an earlier Neovim), each once, newest first, paged."""
    made = []
    for i in range(30):
        owner = ("me", "old", "other")[i % 3]
        chat = ("/a.sidekick.md", "/b.sidekick.md", "/c.sidekick.md")[i % 3 if i % 2 else 0]
        status = S.COMPLETED if i % 4 else S.FAILED
        made.append(
            tasks_store.insert(mk(created_at=100.0 + i, owner=owner, chat=chat, status=status))
        )
    newest = list(reversed(made))

    def want(status=None):
        return [
            t.id
            for t in newest
            if (t.owner == "me" or t.chat in ("/a.sidekick.md", "/b.sidekick.md"))
            and (status is None or t.status is status)
        ]

    chats = ["/b.sidekick.md", "/a.sidekick.md", "/a.sidekick.md"]
    assert [t.id for t in tasks_store.list(Q(owner="me", chats=chats), limit=None)] == want()
    assert [t.id for t in tasks_store.list(Q(owner="me", chats=chats), limit=4, offset=3)] == (
        want()[3:7]
    )
    failed = tasks_store.list(Q(S.FAILED, owner="me", chats=chats), limit=None)
    assert [t.id for t in failed] == want(S.FAILED)
    assert tasks_store.count(Q(owner="me", chats=chats)) == len(want())
    assert tasks_store.count(Q({S.FAILED}, owner="me", chats=chats)) == len(want(S.FAILED))
    # chats alone, and an empty chat list meaning the owner alone
    only_b = [t.id for t in newest if t.chat == "/b.sidekick.md"]
    assert [t.id for t in tasks_store.list(Q(chats=["/b.sidekick.md"]), limit=None)] == only_b
    mine = [t.id for t in newest if t.owner == "me"]
    assert [t.id for t in tasks_store.list(Q(owner="me", chats=[]), limit=None)] == mine


def test_same_created_at_orders_by_insertion(tasks_store: TaskStore) -> None:
    ids = [tasks_store.insert(mk(created_at=5.0)).id for _ in range(5)]
    assert [t.id for t in tasks_store.list(ALL)] == list(reversed(ids))


def test_delete(tasks_store: TaskStore) -> None:
    t = tasks_store.insert(mk())
    tasks_store.set_read_offset(t.id, "chat", 10)
    assert tasks_store.delete(t.id)
    assert tasks_store.get(t.id) is None
    assert not tasks_store.delete(t.id)
    assert tasks_store.get_read_offset(t.id, "chat") == 0


def test_read_offsets_and_mark_read(tasks_store: TaskStore) -> None:
    t = tasks_store.insert(mk())
    assert tasks_store.get_read_offset(t.id, "a.sidekick.md") == 0
    tasks_store.set_read_offset(t.id, "a.sidekick.md", 120)
    tasks_store.set_read_offset(t.id, "b.sidekick.md", 7)
    tasks_store.set_read_offset(t.id, "a.sidekick.md", 150)
    assert tasks_store.get_read_offset(t.id, "a.sidekick.md") == 150
    got = tasks_store.get(t.id)
    assert got.read_offsets == {"a.sidekick.md": 150, "b.sidekick.md": 7}
    assert tasks_store.list(ALL)[0].read_offsets == got.read_offsets
    assert not got.result_read
    assert tasks_store.mark_read(t.id)
    assert tasks_store.get(t.id).result_read
    assert not tasks_store.mark_read("000000")


def test_find_by_call_and_delivered(tasks_store: TaskStore) -> None:
    """The call layer finds the task a call already started, and records that
    its result reached the chat, so a crash never runs the call twice."""
    first = tasks_store.insert(mk(chat="/a.sidekick.md", call_id="c1", created_at=1.0))
    again = tasks_store.insert(mk(chat="/a.sidekick.md", call_id="c1", created_at=2.0))
    tasks_store.insert(mk(chat="/b.sidekick.md", call_id="c1", created_at=3.0))
    found = tasks_store.find_by_call("/a.sidekick.md", "c1")
    assert found is not None and found.id == again.id and found.id != first.id
    assert tasks_store.find_by_call("/a.sidekick.md", "c2") is None
    assert not found.delivered
    assert tasks_store.mark_delivered(again.id)
    assert tasks_store.get(again.id).delivered
    assert not tasks_store.get(first.id).delivered
    assert not tasks_store.mark_delivered("000000")


def test_purge_rules(tasks_store: TaskStore) -> None:
    now = 10 * DAY

    def add(status: S, age_days: float, read: bool) -> str:
        return tasks_store.insert(
            mk(
                status=status,
                created_at=now - age_days * DAY - 10,
                ended_at=None if status in (S.QUEUED, S.RUNNING) else now - age_days * DAY,
                result_read=read,
            )
        ).id

    keep = {
        add(S.COMPLETED, 0.5, True),  # young
        add(S.COMPLETED, 1.5, False),  # old but unread: kept up to 2 days
        add(S.FAILED, 1.5, True),  # failed retention is 2 days
        add(S.CANCELLED, 3.0, False),  # unread failed: kept up to 4 days
        add(S.RUNNING, 30, False),  # never purged
        add(S.QUEUED, 30, False),
    }
    gone = {
        add(S.COMPLETED, 1.5, True),
        add(S.COMPLETED, 2.5, False),
        add(S.FAILED, 2.5, True),
        add(S.CANCELLED, 4.5, False),
    }
    removed = tasks_store.purge(now, 1 * DAY, 2 * DAY)
    assert set(removed) == gone
    assert {t.id for t in tasks_store.list(ALL, limit=None)} == keep
    assert tasks_store.purge(now, DAY, 2 * DAY) == []


# --------------------------------------------------------------------------- SQLite only


def test_two_sqlite_connections_allocate_unique_tokens(tmp_path) -> None:
    path = str(tmp_path / "tasks.db")
    a, b = SqliteStore(path), SqliteStore(path)
    try:
        tokens = []
        for i in range(200):
            store = a if i % 2 else b
            tokens.append(store.insert(mk(created_at=float(i))).id)
        assert len(set(tokens)) == 200
        assert a.count(ALL) == b.count(ALL) == 200
        seen_by_b = [t.id for t in b.list(ALL, limit=None)]
        assert seen_by_b == list(reversed(tokens))
    finally:
        a.close()
        b.close()


def test_sqlite_persists_across_instances(tmp_path) -> None:
    path = str(tmp_path / "tasks.db")
    a = SqliteStore(path)
    t = a.insert(mk(label="kept", env={"X": "1"}, timeout=30.0))
    a.set_read_offset(t.id, "c", 5)
    a.close()
    b = SqliteStore(path)
    got = b.get(t.id)
    assert got.label == "kept" and got.env == {"X": "1"} and got.timeout == 30.0
    assert got.read_offsets == {"c": 5}
    b.close()


@pytest.mark.slow
def test_ten_thousand_tasks_first_page_uses_indexes(tmp_path) -> None:
    store = SqliteStore(str(tmp_path / "tasks.db"))
    statuses = [S.COMPLETED, S.FAILED, S.CANCELLED, S.COMPLETED]
    store.insert_many(
        Task(
            id=f"{i:06x}",
            tool="run_terminal_command",
            command=f"echo {i}",
            status=statuses[i % 4],
            owner="me" if i % 3 else "other",
            created_at=1000.0 + i,
            ended_at=1000.5 + i,
        )
        for i in range(10_000)
    )
    page = store.list(ALL, limit=50)
    assert [t.id for t in page] == [f"{i:06x}" for i in range(9999, 9949, -1)]
    failed = store.list(Q("failed"), limit=50)
    assert len(failed) == 50 and failed[0].id == f"{9997:06x}"
    ended = store.list(Q({"failed", "cancelled"}), limit=50)
    assert [t.id for t in ended][:3] == [f"{9998:06x}", f"{9997:06x}", f"{9994:06x}"]
    assert store.count(ALL) == 10_000
    store.set_read_offset(f"{5:06x}", "chat", 3)
    everything = store.list(ALL, limit=None)
    assert len(everything) == 10_000 and everything[-1].id == "000000"
    assert everything[-6].read_offsets == {"chat": 3}
    assert len(store.list(Q({"failed", "cancelled"}), limit=None)) == 5000
    # No full sort of the history: every plan walks an index in order.
    for kwargs in ({}, {"status": "failed"}, {"owner": "me"}, {"owner": "me", "status": "failed"}):
        plan = store.explain_list(Q(**kwargs))
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        assert "TEMP B-TREE" not in plan, (kwargs, plan)
    store.close()


def test_corrupt_database_raises_store_error_naming_the_path(tmp_path) -> None:
    path = tmp_path / "tasks.db"
    path.write_bytes(b"this is not an sqlite database, just garbage bytes\x00\x01" * 100)
    with pytest.raises(StoreError) as info:
        SqliteStore(str(path))
    message = str(info.value)
    assert str(path) in message
    assert "Move the file aside" in message
    store, warning = open_store("sqlite", str(path))
    assert isinstance(store, MemoryStore) and warning is not None and str(path) in warning
    store, warning = open_store("memory", str(path))
    assert isinstance(store, MemoryStore) and warning is None


def test_unopenable_database_raises_store_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as info:
        SqliteStore(str(blocker / "tasks.db"))
    assert str(blocker / "tasks.db") in str(info.value)


def test_newer_schema_is_refused(tmp_path) -> None:
    path = str(tmp_path / "tasks.db")
    SqliteStore(path).close()
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(path)


def test_sqlite_permissions_and_wal(tmp_path) -> None:
    state = tmp_path / "fresh" / "state"
    path = state / "tasks.db"
    store = SqliteStore(str(path))
    store.insert(mk())
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for suffix in ("-wal", "-shm"):
        extra = str(path) + suffix
        if os.path.exists(extra):
            assert stat.S_IMODE(os.stat(extra).st_mode) & 0o077 == 0
    assert store.pragma("journal_mode") == "wal"
    # another program's lock makes an operation fail fast, never wait seconds
    assert store.pragma("busy_timeout") == 50
    store.close()
    store = SqliteStore(str(path), busy_timeout=0.2)
    assert store.pragma("busy_timeout") == 200
    store.close()
    # An existing file with loose permissions is tightened.
    os.chmod(path, 0o644)
    SqliteStore(str(path)).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


# --------------------------------------------------------------------------- schema versions

V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE tasks (
    seq INTEGER PRIMARY KEY, token TEXT NOT NULL UNIQUE, tool TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL DEFAULT '', command TEXT NOT NULL DEFAULT '', cwd TEXT NOT NULL DEFAULT '',
    env TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL, reason TEXT, exit_code INTEGER,
    pid INTEGER, pid_start TEXT, owner TEXT NOT NULL DEFAULT '', chat TEXT NOT NULL DEFAULT '',
    call_id TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, started_at REAL, ended_at REAL,
    timeout REAL, progress INTEGER, progress_text TEXT, lines INTEGER NOT NULL DEFAULT 0,
    log_dir TEXT NOT NULL DEFAULT '', summary TEXT, error TEXT,
    result_read INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tasks_created ON tasks (created_at);
CREATE INDEX tasks_status_created ON tasks (status, created_at);
CREATE INDEX tasks_owner_created ON tasks (owner, created_at);
CREATE INDEX tasks_owner_status_created ON tasks (owner, status, created_at);
CREATE INDEX tasks_status_ended ON tasks (status, ended_at);
CREATE INDEX tasks_chat_created ON tasks (chat, created_at);
CREATE TABLE read_offsets (
    token TEXT NOT NULL, chat TEXT NOT NULL, offset INTEGER NOT NULL, PRIMARY KEY (token, chat)
) WITHOUT ROWID;
INSERT INTO schema_version (version) VALUES (1);
"""


def write_v1_file(path) -> None:
    """A database exactly as version 1 of the plugin left it, with two tasks."""
    import sqlite3

    conn = sqlite3.connect(str(path))
    conn.executescript(V1_SCHEMA)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executemany(
        "INSERT INTO tasks (token, tool, command, status, exit_code, owner, chat, call_id,"
        " created_at, ended_at, summary, result_read) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (
                "aaa111",
                "run_terminal_command",
                "make",
                "completed",
                0,
                "1:x",
                "/c.md",
                "c1",
                10.0,
                12.0,
                "built",
                1,
            ),
            ("bbb222", "use_agent", "ask", "failed", 3, "1:x", "/c.md", "c2", 20.0, 25.0, "no", 0),
        ],
    )
    conn.execute("INSERT INTO read_offsets VALUES ('aaa111', '/c.md', 42)")
    conn.commit()
    conn.close()


def test_a_version_1_file_is_migrated_keeping_its_rows(tmp_path) -> None:
    import sqlite3

    path = tmp_path / "tasks.db"
    write_v1_file(path)
    store = SqliteStore(str(path))
    try:
        kept = store.get("aaa111")
        assert kept.status is S.COMPLETED and kept.summary == "built" and kept.result_read
        assert kept.read_offsets == {"/c.md": 42} and not kept.delivered
        assert store.get("bbb222").exit_code == 3
        assert store.find_by_call("/c.md", "c2").id == "bbb222"
        assert store.mark_delivered("aaa111") and store.get("aaa111").delivered
        plan = store.explain(
            "SELECT token FROM tasks WHERE chat = ? AND call_id = ?", ["/c.md", "c1"]
        )
        assert "tasks_chat_call" in plan, plan
        # new rows get the new column; the old ones are all still listed
        fresh = store.insert(mk(chat="/c.md", call_id="c3"))
        assert [t.id for t in store.list(ALL, limit=None)][1:] == ["bbb222", "aaa111"]
        assert store.get(fresh.id).delivered is False
    finally:
        store.close()
    conn = sqlite3.connect(str(path))
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(3,)]
    conn.close()
    SqliteStore(str(path)).close()  # opening a current file again changes nothing


def test_a_version_2_file_is_migrated_and_keeps_what_the_call_wrote(tmp_path) -> None:
    """Version 3 keeps the command a call wrote beside the hardened one that ran."""
    import sqlite3

    path = tmp_path / "tasks.db"
    write_v1_file(path)
    conn = sqlite3.connect(str(path))
    for statement in MIGRATIONS[1]:  # the file as version 2 left it
        conn.execute(statement)
    conn.execute("UPDATE schema_version SET version = 2")
    conn.commit()
    conn.close()
    store = SqliteStore(str(path))
    try:
        assert store.get("aaa111").command == "make" and store.get("aaa111").call_command == ""
        fresh = store.insert(mk(command="exec /usr/bin/git status", call_command="git status"))
        assert store.get(fresh.id).call_command == "git status"
    finally:
        store.close()
    conn = sqlite3.connect(str(path))
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(3,)]
    conn.close()


def test_what_the_call_wrote_is_kept_beside_what_ran(tasks_store: TaskStore) -> None:
    t = tasks_store.insert(mk(command="exec /usr/bin/git status", call_command="git status"))
    got = tasks_store.get(t.id)
    assert (got.command, got.call_command) == ("exec /usr/bin/git status", "git status")
    assert got.to_dict()["call_command"] == "git status"


def test_a_newer_file_is_refused_and_left_untouched(tmp_path) -> None:
    import hashlib
    import sqlite3

    path = tmp_path / "tasks.db"
    write_v1_file(path)
    conn = sqlite3.connect(str(path))
    conn.execute("PRAGMA journal_mode = DELETE")  # switching back to WAL would change the file
    conn.execute("UPDATE schema_version SET version = 99")
    conn.execute("CREATE TABLE from_the_future (x)")
    conn.commit()
    conn.close()
    os.chmod(path, 0o644)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore(str(path))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert not os.path.exists(str(path) + "-wal")
    store, warning = open_store("sqlite", str(path))
    assert isinstance(store, MemoryStore) and "newer" in warning
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
