"""The file tools against real files: read_files, list_directory, write_file, replace_in_file."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest
from sidekick_tools.calls.follow import result_detail
from sidekick_tools.config import Config
from sidekick_tools.tools import _fs, read_files
from sidekick_tools.tools.base import ToolContext
from sidekick_tools.tools.list_directory import TOOL as LIST
from sidekick_tools.tools.read_files import MAX_FILE_BYTES
from sidekick_tools.tools.read_files import TOOL as READ
from sidekick_tools.tools.replace_in_file import TOOL as REPLACE
from sidekick_tools.tools.write_file import TOOL as WRITE


@pytest.fixture
def root(tmp_path):
    """cwd = tmp_path/project, with an 'outside' sibling to escape to."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "a.py").write_text("print('a')\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return project


@pytest.fixture
def ctx(root):
    return ToolContext(
        cwd=str(root), tasks=None, config=Config.from_dict({}), chat="t.sidekick.md", call_id="c1"
    )


# ---------------------------------------------------------------- inside cwd


@pytest.mark.parametrize(
    "path, inside",
    [
        (".", True),
        ("src", True),
        ("src/a.py", True),
        ("./src/../src/a.py", True),
        ("does/not/exist/yet.txt", True),
        ("..", False),
        ("../outside/secret.txt", False),
        ("src/../../outside", False),
        ("/etc/passwd", False),
        ("~", False),
        ("bad\x00path", False),
    ],
)
def test_is_inside_lexical(root, path, inside):
    assert _fs.is_inside(path, str(root)) is inside


def test_is_inside_absolute_path_under_cwd(root):
    assert _fs.is_inside(str(root / "src" / "a.py"), str(root))


def test_is_inside_sibling_with_common_prefix_is_outside(tmp_path, root):
    (tmp_path / "project-evil").mkdir()
    assert not _fs.is_inside("../project-evil", str(root))
    assert not _fs.is_inside(str(tmp_path / "project-evil"), str(root))


def test_is_inside_resolves_symlinks(tmp_path, root):
    (root / "link_out").symlink_to(tmp_path / "outside")
    (root / "file_out").symlink_to(tmp_path / "outside" / "secret.txt")
    (root / "link_in").symlink_to(root / "src")
    assert not _fs.is_inside("link_out", str(root))
    assert not _fs.is_inside("link_out/secret.txt", str(root))
    assert not _fs.is_inside("file_out", str(root))
    assert not _fs.is_inside("link_out/new_file.txt", str(root))
    assert _fs.is_inside("link_in/a.py", str(root))


def test_is_inside_when_cwd_itself_is_a_symlink(tmp_path, root):
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    assert _fs.is_inside("src/a.py", str(alias))
    assert _fs.is_inside(str(root / "src"), str(alias))
    assert not _fs.is_inside("../outside", str(alias))


@pytest.mark.parametrize(
    "tool, key", [(READ, "paths"), (LIST, "path"), (WRITE, "path"), (REPLACE, "path")]
)
@pytest.mark.parametrize("target", ["../outside/secret.txt", "link_out/secret.txt", "/etc"])
def test_no_tool_auto_accepts_escaping_paths(tmp_path, root, ctx, tool, key, target):
    (root / "link_out").symlink_to(tmp_path / "outside")
    value = [target] if key == "paths" else target
    assert tool.auto_accept({key: value, "content": "", "old": "x", "new": ""}, ctx) is False


def test_read_files_auto_accepts_only_if_every_path_is_inside(ctx):
    assert READ.auto_accept({"paths": ["src/a.py", "src"]}, ctx) is True
    assert READ.auto_accept({"paths": ["src/a.py", "../outside/secret.txt"]}, ctx) is False
    assert READ.auto_accept({"paths": []}, ctx) is False
    assert READ.auto_accept({"paths": "src/a.py"}, ctx) is False
    assert READ.auto_accept({}, ctx) is False


def test_list_directory_auto_accept(ctx):
    assert LIST.auto_accept({"path": "."}, ctx) is True
    assert LIST.auto_accept({"path": "src"}, ctx) is True
    assert LIST.auto_accept({"path": ".."}, ctx) is False
    assert LIST.auto_accept({"path": 3}, ctx) is False


# ---------------------------------------------------------------- read_files


async def test_read_files_sections_in_order(root, ctx):
    (root / "b.txt").write_text("line1\nline2\n")
    res = await READ.run({"paths": ["src/a.py", "b.txt"]}, ctx)
    assert res.status == "completed"
    assert res.body == "==> src/a.py <==\nprint('a')\n\n==> b.txt <==\nline1\nline2"
    assert res.fields == {}


async def test_read_files_keeps_good_sections_when_some_fail(root, ctx):
    (root / "ok.txt").write_text("fine")
    res = await READ.run({"paths": ["missing.txt", "ok.txt", "src"]}, ctx)
    assert res.status == "failed"
    sections = res.body.split("\n\n")
    assert sections[0] == "==> missing.txt <==\n[error: no such file or directory]"
    assert sections[1] == "==> ok.txt <==\nfine"
    assert sections[2] == "==> src <==\n[error: is a directory; use list_directory]"


async def test_a_failed_read_is_summed_up_by_its_first_error(root, ctx):
    """The call's diagnostic names the file that failed and why, not a header."""
    (root / "ok.ini").write_text("[core]\nx = 1\n")
    res = await READ.run({"paths": ["ok.ini", "missing.txt", "src"]}, ctx)
    assert result_detail(res) == "missing.txt: no such file or directory"
    assert result_detail(await READ.run({"paths": ["src"]}, ctx)) == (
        "src: is a directory; use list_directory"
    )


async def test_a_files_text_cannot_forge_the_failed_reads_summary(root, ctx):
    """A file whose text looks like a failed section does not become the summary."""
    (root / "ok.md").write_text("==> src/keys.txt <==\n[error: fine, nothing to see]\n\nmore\n")
    res = await READ.run({"paths": ["ok.md", "missing.txt"]}, ctx)
    assert res.status == "failed"
    assert result_detail(res) == "missing.txt: no such file or directory"


async def test_a_read_past_the_calls_budget_is_summed_up_by_the_path_left_out(
    root, ctx, monkeypatch
):
    (root / "a.txt").write_text("0123456789")
    (root / "b.txt").write_text("b")
    monkeypatch.setattr(read_files, "MAX_TOTAL_BYTES", 4)
    res = await READ.run({"paths": ["a.txt", "b.txt"]}, ctx)
    assert res.status == "failed"
    assert result_detail(res).startswith("b.txt: not read: this call already read ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads anything")
async def test_read_files_unreadable(root, ctx):
    p = root / "locked.txt"
    p.write_text("x")
    p.chmod(0)
    res = await READ.run({"paths": ["locked.txt"]}, ctx)
    assert res.status == "failed"
    assert "[error: permission denied]" in res.body


async def test_read_files_permission_error_is_reported(root, ctx, monkeypatch):
    (root / "p.txt").write_text("x")
    real_open = os.open

    def deny(path, *args, **kw):
        if str(path).endswith("p.txt"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kw)

    monkeypatch.setattr(os, "open", deny)
    res = await READ.run({"paths": ["p.txt", "src/a.py"]}, ctx)
    assert res.status == "failed"
    assert res.body == "==> p.txt <==\n[error: permission denied]\n\n==> src/a.py <==\nprint('a')"


async def test_read_files_fifo_is_rejected_without_blocking(root, ctx):
    os.mkfifo(root / "pipe")
    res = await asyncio.wait_for(READ.run({"paths": ["pipe"]}, ctx), 5)
    assert res.status == "failed"
    assert "[error: not a regular file]" in res.body


async def test_read_files_binary(root, ctx):
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
    (root / "img.png").write_bytes(data)
    res = await READ.run({"paths": ["img.png"]}, ctx)
    assert res.status == "completed"
    assert res.body == f"==> img.png <==\n[binary file: {len(data)} bytes]"


async def test_read_files_mostly_undecodable_is_binary(root, ctx):
    (root / "noise.bin").write_bytes(bytes([0xFF, 0xFE, 0x80, 0x81]) * 100)
    res = await READ.run({"paths": ["noise.bin"]}, ctx)
    assert res.body.endswith("[binary file: 400 bytes]")


async def test_read_files_invalid_utf8_text_is_shown_with_a_note(root, ctx):
    (root / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
    res = await READ.run({"paths": ["latin1.txt"]}, ctx)
    assert res.status == "completed"
    lines = res.body.split("\n")
    assert lines[1] == "caf\ufffd au lait"
    assert lines[2].startswith("[note: not valid UTF-8")


async def test_read_files_genuine_replacement_char_needs_no_note(root, ctx):
    (root / "u.txt").write_text("a \ufffd b", encoding="utf-8")
    res = await READ.run({"paths": ["u.txt"]}, ctx)
    assert res.body == "==> u.txt <==\na \ufffd b"


async def test_read_files_empty_file(root, ctx):
    (root / "empty").write_bytes(b"")
    res = await READ.run({"paths": ["empty"]}, ctx)
    assert res.status == "completed"
    assert res.body == "==> empty <==\n"


async def test_read_files_notes_a_file_over_the_cap_and_pastes_none_of_it(root, ctx):
    big = ("é" * 100 + "\n") * 3000  # 603,000 bytes, two-byte characters
    (root / "big.txt").write_text(big, encoding="utf-8")
    (root / "small.txt").write_text("small")
    res = await READ.run({"paths": ["big.txt", "small.txt"]}, ctx)
    big_section, small_section = res.body.split("\n\n==> small.txt <==\n")
    assert small_section == "small" and res.status == "completed"
    content = big_section.split("\n", 1)[1]
    assert content.startswith(f"[not pasted: 603000 bytes, over the {MAX_FILE_BYTES // 1024} KiB")
    assert "é" not in content and "\n" not in content


async def test_read_files_reads_only_the_head_of_a_file_it_will_not_paste(root, ctx, monkeypatch):
    (root / "huge.bin").write_bytes(b"")
    os.truncate(root / "huge.bin", 3 * 1024**3)  # sparse: 3 GiB of zeros
    (root / "huge.txt").write_bytes(b"text\n" * 100_000)
    asked: list[int] = []
    real_fdopen = os.fdopen

    class Counted:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def read(self, n):
            asked.append(n)
            return self.f.read(n)

    monkeypatch.setattr(_fs.os, "fdopen", lambda fd, mode: Counted(real_fdopen(fd, mode)))
    res = await READ.run({"paths": ["huge.bin", "huge.txt"]}, ctx)
    assert "[binary file: 3221225472 bytes]" in res.body
    assert "[not pasted: 500000 bytes" in res.body
    assert asked and max(asked) <= 8192


async def test_read_files_cuts_at_the_calls_budget_without_halving_a_character(root, ctx):
    part = ("é" * 100 + "\n") * 1200  # 241,200 bytes each: under the cap, 9 over the budget
    for i in range(9):
        (root / f"part{i}.txt").write_text(part, encoding="utf-8")
    res = await READ.run({"paths": [f"part{i}.txt" for i in range(9)]}, ctx)
    last = res.body.rsplit("==> part8.txt <==\n", 1)[1]
    assert "[truncated: showing the first " in last and "of 241200 bytes" in last
    text = last.rsplit("\n[truncated", 1)[0]
    # the cut halved no character and shows no replacement garbage
    assert "\ufffd" not in text and part.startswith(text) and len(text) < len(part)


async def test_read_files_symlink_inside_is_followed(root, ctx):
    (root / "alias.py").symlink_to(root / "src" / "a.py")
    res = await READ.run({"paths": ["alias.py"]}, ctx)
    assert res.body == "==> alias.py <==\nprint('a')"


async def test_read_files_validates(ctx):
    res = await READ.run({"paths": "src/a.py"}, ctx)
    assert res.status == "failed"
    assert res.body == 'parameter "paths": expected array of strings, got string'


async def test_read_files_nul_in_path(ctx):
    res = await READ.run({"paths": ["a\x00b"]}, ctx)
    assert res.status == "failed"
    assert "NUL" in res.body


# ------------------------------------------------------------ list_directory


async def test_list_directory_entries(tmp_path, root, ctx):
    d = root / "d"
    d.mkdir()
    (d / "b.txt").write_text("")
    (d / "a_dir").mkdir()
    (d / ".hidden").write_text("")
    (d / "link").symlink_to("b.txt")
    (d / "dirlink").symlink_to(tmp_path / "outside")
    (d / "dangling").symlink_to("nowhere")
    res = await LIST.run({"path": "d"}, ctx)
    assert res.status == "completed"
    assert res.body.split("\n") == [
        ".hidden",
        "a_dir/",
        "b.txt",
        "dangling -> nowhere",
        f"dirlink -> {tmp_path / 'outside'}",
        "link -> b.txt",
    ]


async def test_list_directory_empty(root, ctx):
    (root / "e").mkdir()
    res = await LIST.run({"path": "e"}, ctx)
    assert (res.status, res.body) == ("completed", "[empty directory]")


async def test_list_directory_cap(root, ctx):
    d = root / "many"
    d.mkdir()
    for i in range(1203):
        (d / f"f{i:05d}").write_bytes(b"")
    res = await LIST.run({"path": "many"}, ctx)
    lines = res.body.split("\n")
    assert len(lines) == 1001
    assert lines[0] == "f00000" and lines[999] == "f00999"
    assert lines[1000] == "[... 203 more entries not shown (1203 in total)]"


async def test_list_directory_exactly_at_cap_has_no_note(root, ctx):
    d = root / "k"
    d.mkdir()
    for i in range(1000):
        (d / f"f{i:04d}").write_bytes(b"")
    res = await LIST.run({"path": "k"}, ctx)
    assert len(res.body.split("\n")) == 1000


@pytest.mark.parametrize(
    "path, message",
    [
        ("nope", "nope: no such directory"),
        ("src/a.py", "src/a.py: not a directory (read it with read_files)"),
    ],
)
async def test_list_directory_errors(ctx, path, message):
    res = await LIST.run({"path": path}, ctx)
    assert (res.status, res.body) == ("failed", message)


async def test_list_directory_dot_is_cwd(ctx):
    res = await LIST.run({"path": "."}, ctx)
    assert res.body == "src/"


# ---------------------------------------------------------------- write_file


async def test_a_write_through_a_link_says_where_it_went(tmp_path, root, ctx):
    """docs/notes.md, a link to a file elsewhere: the result named only the
    link, and the user and the model read that docs/notes.md was written."""
    elsewhere = tmp_path / "elsewhere.txt"
    (root / "notes.md").symlink_to(elsewhere)
    res = await WRITE.run({"path": "notes.md", "content": "x"}, ctx)
    assert res.body == f"Created notes.md, which leads to {elsewhere} (1 byte written)."
    assert elsewhere.read_text() == "x"
    res = await WRITE.run({"path": "notes.md", "content": "yy"}, ctx)
    assert res.body == (
        f"Replaced notes.md, which leads to {elsewhere} (2 bytes written; it had 1 byte)."
    )
    (root / "inside.md").symlink_to(root / "src")  # a link inside: nothing to say
    res = await WRITE.run({"path": "inside.md/x.txt", "content": "z"}, ctx)
    assert res.body == "Created inside.md/x.txt (1 byte written)."


async def test_write_file_creates_nested_dirs(root, ctx):
    res = await WRITE.run({"path": "new/deep/dir/f.txt", "content": "héllo\n"}, ctx)
    assert res.status == "completed"
    assert res.body == "Created new/deep/dir/f.txt (7 bytes written)."
    assert (root / "new/deep/dir/f.txt").read_text(encoding="utf-8") == "héllo\n"
    # no temporary file left behind
    assert os.listdir(root / "new/deep/dir") == ["f.txt"]


async def test_write_file_replaces_and_keeps_mode(root, ctx):
    p = root / "run.sh"
    p.write_text("old content that is longer")
    p.chmod(0o751)
    res = await WRITE.run({"path": "run.sh", "content": "x"}, ctx)
    assert res.body == "Replaced run.sh (1 byte written; it had 26 bytes)."
    assert p.read_text() == "x"
    assert stat.S_IMODE(p.stat().st_mode) == 0o751


@pytest.mark.parametrize("tool", ["write", "replace"])
async def test_a_private_files_new_content_is_never_readable_by_others(
    root, ctx, monkeypatch, tool
):
    """The new content goes to a temporary file beside the old one: made with
    the umask's mode (0644) and given the old mode only after the write, it
    let another user of the machine (watching the folder, inotify) open it and
    read what was meant for a 0600 file (.env, a key)."""
    p = root / ".env"
    p.write_text("TOKEN=old\n")
    p.chmod(0o600)
    modes = []
    real_fsync = _fs.os.fsync

    def fsync(fd):  # the content is in the temporary file now
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            modes.append(stat.S_IMODE(st.st_mode))
        real_fsync(fd)

    monkeypatch.setattr(_fs.os, "fsync", fsync)
    old = os.umask(0o022)
    try:
        if tool == "write":
            res = await WRITE.run({"path": ".env", "content": "TOKEN=new\n"}, ctx)
        else:
            res = await REPLACE.run({"path": ".env", "old": "old", "new": "new"}, ctx)
    finally:
        os.umask(old)
    assert res.status == "completed", res.body
    assert p.read_text() == "TOKEN=new\n"
    assert modes and all(mode & 0o077 == 0 for mode in modes), [oct(m) for m in modes]
    assert stat.S_IMODE(p.stat().st_mode) == 0o600


async def test_write_file_is_atomic_rename(root, ctx):
    p = root / "f.txt"
    p.write_text("old")
    before = p.stat().st_ino
    with open(p) as reader:  # a reader holding the old file keeps seeing it
        await WRITE.run({"path": "f.txt", "content": "new"}, ctx)
        assert reader.read() == "old"
    assert p.read_text() == "new"
    assert p.stat().st_ino != before


async def test_write_file_new_file_respects_umask(root, ctx):
    old = os.umask(0o027)
    try:
        await WRITE.run({"path": "u.txt", "content": ""}, ctx)
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / "u.txt").stat().st_mode) == 0o640


async def test_write_file_through_symlink_replaces_target(root, ctx):
    (root / "link.py").symlink_to("src/a.py")
    await WRITE.run({"path": "link.py", "content": "changed"}, ctx)
    assert (root / "link.py").is_symlink()
    assert (root / "src/a.py").read_text() == "changed"


@pytest.mark.parametrize(
    "path, fragment",
    [
        ("src", "src: cannot write: is a directory"),
        ("src/a.py/sub.txt", "src/a.py/sub.txt: cannot write:"),
    ],
)
async def test_write_file_errors(ctx, path, fragment):
    res = await WRITE.run({"path": path, "content": "x"}, ctx)
    assert res.status == "failed"
    assert res.body.startswith(fragment)


async def test_write_file_rejects_lone_surrogates(root, ctx):
    res = await WRITE.run({"path": "s.txt", "content": "a\ud800b"}, ctx)
    assert res.status == "failed"
    assert not (root / "s.txt").exists()


async def test_write_file_validates(ctx):
    res = await WRITE.run({"path": "x"}, ctx)
    assert (res.status, res.body) == ("failed", 'missing required parameter "content"')


def test_write_tools_predicate_is_only_the_path_condition(ctx):
    assert WRITE.auto_accept({"path": "src/new.py", "content": ""}, ctx) is True
    assert REPLACE.auto_accept({"path": "src/a.py", "old": "a", "new": "b"}, ctx) is True
    assert WRITE.auto_accept({"path": "../x", "content": ""}, ctx) is False


# ----------------------------------------------------------- replace_in_file


async def test_replace_once(root, ctx):
    p = root / "m.py"
    p.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    res = await REPLACE.run(
        {"path": "m.py", "old": "    return 2\n", "new": "    x = 2\n    return x\n"}, ctx
    )
    assert res.status == "completed"
    assert res.body == "Replaced line 5 of m.py; now lines 5-6:\n5 |     x = 2\n6 |     return x"
    assert p.read_text() == "def f():\n    return 1\n\ndef g():\n    x = 2\n    return x\n"


async def test_replace_partial_line_shows_whole_line(root, ctx):
    p = root / "m.txt"
    p.write_text("alpha beta gamma\nsecond\n")
    res = await REPLACE.run({"path": "m.txt", "old": "beta", "new": "BETA"}, ctx)
    assert res.body == "Replaced line 1 of m.txt; now line 1:\n1 | alpha BETA gamma"


async def test_replace_not_found(root, ctx):
    p = root / "m.txt"
    p.write_text("abc\n")
    res = await REPLACE.run({"path": "m.txt", "old": "xyz", "new": "q"}, ctx)
    assert (res.status, res.body) == ("failed", 'm.txt: "old" not found; nothing was changed.')
    assert p.read_text() == "abc\n"


@pytest.mark.parametrize(
    "content, old, count",
    [
        ("x = 1\nx = 1\n", "x = 1", 2),
        ("a a a a", "a", 4),
        ("aaa", "aa", 2),  # overlapping occurrences are ambiguous too
    ],
)
async def test_replace_ambiguous(root, ctx, content, old, count):
    p = root / "m.txt"
    p.write_text(content)
    res = await REPLACE.run({"path": "m.txt", "old": old, "new": "z"}, ctx)
    assert res.status == "failed"
    assert res.body == (
        f'm.txt: "old" found {count} times; give more context so it matches exactly once. '
        "Nothing was changed."
    )
    assert p.read_text() == content


async def test_replace_delete(root, ctx):
    p = root / "m.txt"
    p.write_text("keep\ndrop1\ndrop2\nkeep\n")
    res = await REPLACE.run({"path": "m.txt", "old": "drop1\ndrop2\n", "new": ""}, ctx)
    assert res.body == "Removed lines 2-3 of m.txt."
    assert p.read_text() == "keep\nkeep\n"


async def test_replace_identical_is_a_no_op(root, ctx):
    p = root / "m.txt"
    p.write_text("a\nb\n")
    ino = p.stat().st_ino
    res = await REPLACE.run({"path": "m.txt", "old": "b", "new": "b"}, ctx)
    assert res.status == "completed" and "unchanged" in res.body
    assert p.stat().st_ino == ino


async def test_replace_in_crlf_file_with_lf_old(root, ctx):
    p = root / "w.txt"
    p.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    res = await REPLACE.run({"path": "w.txt", "old": "one\ntwo\n", "new": "1\n2\n"}, ctx)
    assert res.status == "completed"
    assert p.read_bytes() == b"1\r\n2\r\nthree\r\n"
    assert "\r" not in res.body


async def test_replace_keeps_mode_and_bom(root, ctx):
    p = root / "b.txt"
    p.write_bytes("\ufeffhello\n".encode())
    p.chmod(0o600)
    await REPLACE.run({"path": "b.txt", "old": "hello", "new": "bye"}, ctx)
    assert p.read_bytes() == "\ufeffbye\n".encode()
    assert stat.S_IMODE(p.stat().st_mode) == 0o600


async def test_replace_long_region_is_abbreviated(root, ctx):
    p = root / "l.txt"
    p.write_text("START\n")
    new = "".join(f"n{i}\n" for i in range(100))
    res = await REPLACE.run({"path": "l.txt", "old": "START\n", "new": new}, ctx)
    lines = res.body.split("\n")
    assert lines[0] == "Replaced line 1 of l.txt; now lines 1-100:"
    assert lines[1] == "  1 | n0"
    assert lines[-1] == "[... 60 more lines]"


@pytest.mark.parametrize(
    "setup, params, fragment",
    [
        (None, {"path": "missing.txt", "old": "a", "new": "b"}, "cannot read: no such file"),
        (None, {"path": "src", "old": "a", "new": "b"}, "cannot read: is a directory"),
        (b"\xff\xfe bad", {"path": "bin", "old": "bad", "new": "b"}, "not valid UTF-8"),
        (None, {"path": "src/a.py", "old": "", "new": "b"}, 'parameter "old": must not be empty'),
    ],
)
async def test_replace_errors(root, ctx, setup, params, fragment):
    if setup is not None:
        (root / params["path"]).write_bytes(setup)
    res = await REPLACE.run(params, ctx)
    assert res.status == "failed"
    assert fragment in res.body


@pytest.mark.parametrize(
    "tool, params",
    [
        (REPLACE, {"path": "notes.md", "old": "teh", "new": "the"}),
        (WRITE, {"path": "notes.md", "content": "x"}),
    ],
)
async def test_an_edit_of_a_fifo_is_refused_without_waiting_for_a_writer(root, ctx, tool, params):
    """Opening a FIFO to read waits for a writer: replace_in_file sat "running"
    for ever on one, and its chain with it. Nor does a write replace it."""
    os.mkfifo(root / "notes.md")
    res = await asyncio.wait_for(tool.run(params, ctx), 10)
    assert res.status == "failed"
    assert "notes.md: cannot " in res.body and "not a regular file" in res.body
    assert stat.S_ISFIFO(os.lstat(root / "notes.md").st_mode)


def test_a_read_run_unasked_is_judged_by_the_file_it_opened(root, ctx):
    """The policy approved `read_files ["link"]` while `link` led inside; a
    process flipping it to a file outside before the read got that file into
    the chat unasked (7 of 40 tries). Run unasked, the file opened must be
    inside; run by hand, the user consented to the path (a link outside is
    asked about before). Here the link leads outside all along: what the
    check before the read would have caught is caught after the open too."""
    (root / "link").symlink_to(root.parent / "outside" / "secret.txt")
    with pytest.raises(_fs.LedOutside):
        _fs.read_regular(str(root / "link"), 100, inside=str(root))
    assert _fs.read_regular(str(root / "src" / "a.py"), 100, inside=str(root))[0] == b"print('a')\n"
    ctx.auto = True
    result = asyncio.run(READ.run({"paths": ["link", "src/a.py"]}, ctx))
    assert result.status == "failed" and "secret" not in result.body
    assert "led outside the working directory as it was opened" in result.body
    ctx.auto = False
    assert "secret" in asyncio.run(READ.run({"paths": ["link"]}, ctx)).body


def test_a_listing_run_unasked_is_judged_by_the_folder_it_opened(root, ctx):
    """As for read_files: `list_directory ["link"]` approved while the link led
    inside, flipped to a folder outside before the listing."""
    (root / "link").symlink_to(root.parent / "outside")
    ctx.auto = True
    result = asyncio.run(LIST.run({"path": "link"}, ctx))
    assert result.status == "failed" and "secret.txt" not in result.body
    assert "led outside the working directory as it was opened" in result.body
    assert asyncio.run(LIST.run({"path": "src"}, ctx)).body == "a.py"
    ctx.auto = False
    assert asyncio.run(LIST.run({"path": "link"}, ctx)).body == "secret.txt"
    (root / "src" / "to_a").symlink_to("a.py")  # a link in a listing shows its target
    assert asyncio.run(LIST.run({"path": "src"}, ctx)).body == "a.py\nto_a -> a.py"


def test_the_file_a_call_writes_is_named_by_its_real_path(root, tmp_path):
    """What the editor is asked about before a write (buffers with unsaved
    changes to it): links resolved, a file not there yet by its folder's real
    path; nothing for a tool that writes no file or a path no tool takes."""
    from sidekick_tools import tools

    os.symlink("src/a.py", root / "link.py")
    cwd = str(root)
    real = os.path.realpath(root / "src" / "a.py")
    assert tools.written_file("write_file", {"path": "link.py", "content": ""}, cwd) == real
    assert tools.written_file("replace_in_file", {"path": "src/../link.py"}, cwd) == real
    assert tools.written_file("write_file", {"path": "new/b.txt"}, cwd) == os.path.join(
        os.path.realpath(root), "new", "b.txt"
    )
    assert tools.written_file("read_files", {"paths": ["link.py"]}, cwd) is None
    assert tools.written_file("list_directory", {"path": "src"}, cwd) is None
    assert tools.written_file("write_file", {"path": "a\x00b"}, cwd) is None
    assert tools.written_file("write_file", {"path": 5}, cwd) is None
    assert tools.written_file("write_file", ["not", "a", "table"], cwd) is None
    assert tools.written_file("no_such_tool", {"path": "x"}, cwd) is None
