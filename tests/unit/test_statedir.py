"""The state directory the host opens: the configured one, else the temporary
one setup() named to the user (no second message), else a fresh one."""

from __future__ import annotations

import os
import shutil

from sidekick_tools.config import tasks_config
from sidekick_tools.statedir import open_state_dir
from sidekick_tools.tasks.start import FALLBACK, start_manager


def test_a_usable_state_dir_is_used(tmp_path):
    state = open_state_dir(str(tmp_path / "state"), str(tmp_path / "unused"))
    assert (state.path, state.problem, state.told) == (str(tmp_path / "state"), None, False)
    assert not (tmp_path / "unused").exists()


def test_an_unusable_state_dir_gives_way_to_the_fallback_setup_named(tmp_path):
    (tmp_path / "file").write_text("x")
    fallback = tmp_path / "fallback"
    fallback.mkdir(mode=0o700)
    state = open_state_dir(str(tmp_path / "file" / "state"), str(fallback))
    assert (state.path, state.told) == (str(fallback), True)
    assert state.problem and str(tmp_path / "file" / "state") in state.problem


def test_an_unusable_fallback_gives_a_fresh_directory_the_host_says(tmp_path):
    (tmp_path / "file").write_text("x")
    state = open_state_dir(str(tmp_path / "file" / "state"), str(tmp_path / "file" / "too"))
    assert state.told is False and os.path.isdir(state.path)
    assert state.path != str(tmp_path / "file" / "too")
    os.rmdir(state.path)


async def test_a_fallback_the_user_was_told_of_is_not_said_again(tmp_path):
    (tmp_path / "file").write_text("x")
    said: list[str] = []
    for fallback in (str(tmp_path), None):
        state = open_state_dir(str(tmp_path / "file" / "state"), fallback)
        manager, kind = start_manager(tasks_config(), state, "owner", said.append)
        await manager.shutdown(kill=True)
        assert kind == FALLBACK
        if not state.told:
            shutil.rmtree(state.path)
    assert len(said) == 1 and "kept in memory" in said[0]  # only where none was named


def test_a_fallback_not_ours_alone_gives_a_fresh_directory(tmp_path):
    """The temporary directory setup() named may have been removed and made
    again by someone else: one open to others, or a symlink, is not used."""
    (tmp_path / "file").write_text("x")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    for fallback in (shared, link):
        state = open_state_dir(str(tmp_path / "file" / "state"), str(fallback))
        assert state.path not in (str(shared), str(link)) and state.told is False
        assert os.stat(state.path).st_mode & 0o777 == 0o700
        os.rmdir(state.path)


def test_a_state_dir_another_user_owns_is_not_used(tmp_path, monkeypatch):
    """A configured shared path (/tmp/sk-state) made first by another user: its
    owner could read, replace or plant the logs and the database there. Seen
    as that user's (this process's uid made to differ), it gives way to a fresh
    folder of ours, and the reason says whose it is."""
    from sidekick_tools import statedir

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)  # theirs, open to all: its mode is theirs to keep
    uid = os.getuid()
    monkeypatch.setattr(statedir.os, "getuid", lambda: uid + 1)
    state = open_state_dir(str(theirs), None)
    monkeypatch.undo()
    assert state.path != str(theirs)
    assert state.problem == f"{theirs} is unusable (owned by another user)"
    # never changed: root's chmod would succeed on it (it made it 0700)
    assert theirs.stat().st_mode & 0o777 == 0o777
    os.rmdir(state.path)
