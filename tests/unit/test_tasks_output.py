from __future__ import annotations

import pytest
from sidekick_tools.tasks import log_follower
from sidekick_tools.tasks.log_follower import (
    MAX_PARTIAL_LINE,
    LogFollower,
    summarize_file,
    summarize_tail,
)
from sidekick_tools.tasks.output import (
    Marker,
    Progress,
    compile_filter,
    filter_lines,
    parse_line,
    read_new,
    strip_ansi,
    summary_of,
)

from tests.conftest import answers


@pytest.mark.parametrize(
    "line,expected",
    [
        ("[PROGRESS] building", Marker("progress", "building", None)),
        ("[PROGRESS:45] compiling 9/20", Marker("progress", "compiling 9/20", 45)),
        ("[PROGRESS: 7%] x", Marker("progress", "x", 7)),
        ("[PROGRESS:250] too far", Marker("progress", "too far", 100)),
        ("  [RESULT] all good", Marker("result", "all good", None)),
        ("[RESULT]", Marker("result", "", None)),
        ("[ERROR] boom\n", Marker("error", "boom", None)),
        ("[WARNING] careful\r\n", Marker("warning", "careful", None)),
        ("\x1b[32m[PROGRESS:10] green\x1b[0m", Marker("progress", "green", 10)),
        ("text [PROGRESS:10] not at start", None),
        ("[PROGRESSING] nope", None),
        ("[RESULTS] nope", None),
        ("plain", None),
    ],
)
def test_parse_line(line: str, expected: Marker | None) -> None:
    assert parse_line(line) == expected


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[1;31mred\x1b[0m text") == "red text"
    assert strip_ansi("\x1b]0;title\x07after") == "after"
    assert strip_ansi("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"
    assert strip_ansi("a\x1b[2Kb\x1b[?25lc\x1bMd") == "abcd"
    assert strip_ansi("no escapes [1m here") == "no escapes [1m here"
    # the 8-bit CSI alone (no ESC anywhere) is stripped too
    assert strip_ansi("a\x9b31mb\x9b0m") == "ab"


def test_summary_result_marker_wins() -> None:
    text = (
        "> ask something\n"
        "thinking\n"
        "[RESULT] first try\n"
        "old\n"
        "[PROGRESS:90] almost\n"
        "\x1b[1m[RESULT]\x1b[0m final answer\n"
        "line two\n"
        "> another prompt\n"
        "tail\n"
    )
    assert summary_of(text) == "final answer\nline two\n> another prompt\ntail"


def test_summary_result_only_at_line_start() -> None:
    # "[RESULT]" inside a line is text, not a marker: the summary is the tail
    assert summary_of("x [RESULT] not one\ny\n") == "x [RESULT] not one\ny"
    assert summary_of("a\n\t[RESULT] yes\nb\n") == "yes\nb"


def test_summary_prompt_fallback() -> None:
    text = "noise\n> first prompt\nmiddle\n> \x1b[36mlast prompt\x1b[0m\nanswer 1\nanswer 2\n"
    # the prompt's own line is part of the response (kiro-style CLIs answer there)
    assert summary_of(text) == "last prompt\nanswer 1\nanswer 2"
    assert summary_of("chatter\nmore chatter\n> the one-line answer\n") == "the one-line answer"
    # Nothing after the last prompt: the tail instead.
    assert summary_of("a\nb\n> \n") == "a\nb\n>"
    assert summary_of("a\nb\n>  \n\n") == "a\nb\n>"


def test_summary_tail_limits() -> None:
    text = "\n".join(f"line {i}" for i in range(200)) + "\n"
    summary = summary_of(text)
    lines = summary.split("\n")
    assert len(lines) == 50 and lines[0] == "line 150" and lines[-1] == "line 199"
    wide = "\n".join("x" * 1000 + str(i) for i in range(30))
    summary = summary_of(wide)
    assert len(summary.encode()) <= 8 * 1024
    assert summary.endswith("x29")
    assert summary_of("\x1b[31mred\x1b[0m\r\nprogress 10%\rprogress 100%\n") == (
        "red\nprogress 100%"
    )
    assert summary_of("") == ""


def test_read_new_complete_lines(tmp_path) -> None:
    p = tmp_path / "log"
    p.write_bytes(b"one\ntwo\nthr")
    c = read_new(str(p), 0)
    assert c.data == b"one\ntwo\n" and c.next_offset == 8 and c.more
    c = read_new(str(p), 8)
    assert c.data == b"" and c.next_offset == 8
    c = read_new(str(p), 8, complete_lines=False)
    assert c.data == b"thr" and c.next_offset == 11 and not c.more
    c = read_new(str(p), 0, max_bytes=5)
    assert c.data == b"one\n" and c.next_offset == 4
    long = tmp_path / "long"
    long.write_bytes(b"x" * 100 + b"\n")
    c = read_new(str(long), 0, max_bytes=10)
    assert c.data == b"x" * 10 and c.more  # a line longer than max_bytes comes in pieces
    assert read_new(str(tmp_path / "missing"), 0).data == b""
    c = read_new(str(p), 1000)  # beyond the end (file replaced): start over
    assert c.data == b"one\ntwo\n"
    assert read_new(str(p), 0).text == "one\ntwo\n"


def test_a_long_line_comes_in_pieces_that_never_split_a_word(tmp_path) -> None:
    """A line longer than a read's bound comes in pieces: cut at a raw offset,
    a key went half in one piece and half in the next, whose start (without
    the key's prefix) masking did not know (an MCP client read it in clear)."""
    from sidekick_tools.secrets_mask import mask

    key = "sk-ant-api03-" + "Q" * 40 + "R" * 40
    long = tmp_path / "long"
    long.write_bytes(b"x" * 90 + b" " + key.encode() + b" tail\n")
    first = read_new(str(long), 0, max_bytes=120)
    assert first.data == b"x" * 90 + b" " and first.more
    rest = read_new(str(long), first.next_offset, max_bytes=4096)
    assert rest.data == key.encode() + b" tail\n"
    assert mask(rest.text) == "sk-ant-*** tail\n"


def test_filter_lines_consumes_nothing() -> None:
    text = "a1\nb1\na2\n"
    assert filter_lines(text, "^a") == ["a1", "a2"]
    assert filter_lines(text, "/b/") == ["b1"]
    assert filter_lines(text, compile_filter("2$")) == ["a2"]
    with pytest.raises(ValueError, match="invalid filter regex"):
        filter_lines(text, "(")
    # what re cannot compile without failing otherwise: nested too deep, a huge count
    for pattern in ("(" * 600 + ")" * 600, "a{99999999999}"):
        with pytest.raises(ValueError, match="invalid filter regex"):
            compile_filter(pattern)


def test_follower_reads_only_new_bytes(tmp_path) -> None:
    p = tmp_path / "stdout"
    p.write_bytes(b"")
    f = LogFollower(str(p))
    assert not f.poll()
    first = b"".join(b"line %d\n" % i for i in range(1000))
    with open(p, "ab") as out:
        out.write(first)
    f.poll()
    assert f.bytes_read == len(first) and f.lines == 1000 and f.offset == len(first)
    with open(p, "ab") as out:
        out.write(b"[PROGRESS:30] a third\n")
    assert f.poll()
    assert f.bytes_read == len(first) + 22
    assert f.progress == Progress(30, "a third")
    assert not f.poll()  # nothing new
    assert f.bytes_read == len(first) + 22
    with open(p, "ab") as out:
        out.write(b"[PROGRESS:30] a third\n")
    assert not f.poll()  # same progress again: no change
    with open(p, "ab") as out:
        out.write(b"[PROGRESS] no percent now\n")
    assert f.poll() and f.progress == Progress(None, "no percent now")
    assert f.lines == 1003


def test_follower_partial_lines(tmp_path) -> None:
    p = tmp_path / "stdout"
    p.write_bytes(b"abc\n[PROGRE")
    f = LogFollower(str(p))
    assert not f.poll()
    assert f.lines == 1 and f.offset == 4 and f.bytes_read == 11
    with open(p, "ab") as out:
        out.write(b"SS:50] half")
    assert not f.poll()  # line not finished yet
    assert f.bytes_read == 22  # the partial line is kept, not re-read
    with open(p, "ab") as out:
        out.write(b"\nmore")
    assert f.poll() and f.progress == Progress(50, "half")
    assert f.bytes_read == 27 and f.lines == 2
    f.finish()
    assert f.lines == 3  # the final unterminated line counts once the writer is done


def test_follower_markers_need_line_start_across_polls(tmp_path) -> None:
    p = tmp_path / "stdout"
    p.write_bytes(b"x" * (MAX_PARTIAL_LINE + 10))  # one huge line, consumed without newline
    f = LogFollower(str(p))
    f.poll()
    assert f.offset == MAX_PARTIAL_LINE + 10
    with open(p, "ab") as out:
        out.write(b"[PROGRESS:10] same line, not a marker\n")
    assert not f.poll() and f.progress is None
    with open(p, "ab") as out:
        out.write(b"[PROGRESS:20] real\n")
    assert f.poll() and f.progress == Progress(20, "real")
    with open(p, "ab") as out:
        out.write(b"bar 1%\r[PROGRESS:60] redrawn with CR\r")
    assert f.poll() and f.progress == Progress(60, "redrawn with CR")


def test_follower_tracks_result_and_prompt_offsets(tmp_path) -> None:
    p = tmp_path / "stdout"
    head = b"> the prompt\nthinking\n"
    result = b"\x1b[1m[RESULT]\x1b[0m the answer\ndetails\n"
    filler = b"".join(b"after %d\n" % i for i in range(20_000))  # far more than a tail
    p.write_bytes(head + result + filler)
    f = LogFollower(str(p))
    f.poll(max_bytes=4096)
    f.poll()
    assert f.result_offset == len(head)
    assert f.prompt_end == len(b"> ")
    summary = summarize_file(str(p), f, max_bytes=200)
    assert summary.startswith("the answer\ndetails\nafter 0")
    # Prompt only: the content after it.
    q = tmp_path / "agent"
    q.write_bytes(b"banner\n> question\nanswer line\n")
    g = LogFollower(str(q))
    g.poll()
    assert summarize_file(str(q), g) == "question\nanswer line"
    # Neither: the tail; an unknown layout without follower also gives the tail.
    r = tmp_path / "plain"
    r.write_bytes(b"".join(b"n%d\n" % i for i in range(100)))
    h = LogFollower(str(r))
    h.poll()
    assert summarize_file(str(r), h).split("\n")[-1] == "n99"
    assert summarize_file(str(r)).split("\n")[0] == "n50"
    assert summarize_file(str(tmp_path / "missing")) == ""


def test_follower_restarts_on_truncation(tmp_path) -> None:
    p = tmp_path / "stdout"
    p.write_bytes(b"one\ntwo\n")
    f = LogFollower(str(p))
    f.poll()
    p.write_bytes(b"x\n")
    f.poll()
    assert f.lines == 1 and f.offset == 2


def _state(f: LogFollower) -> tuple:
    return (f.lines, f.progress, f.result_offset, f.prompt_end, f.offset, f.bytes_read)


def _follow(path, data: bytes, step: int | None) -> LogFollower:
    """Follow `data` appended `step` bytes at a time (None: all at once)."""
    path.write_bytes(b"")
    f = LogFollower(str(path))
    step = step or max(1, len(data))
    for i in range(0, len(data), step):
        with open(path, "ab") as out:
            out.write(data[i : i + step])
        f.poll()
    f.finish()
    return f


SPLIT_SAMPLE = (
    b"> the prompt\r\nthinking [not a marker]\n  \x1b[1m[PROGRESS:40]\x1b[0m forty\n"
    b"x > not a prompt\n[RESULT] answer\r\nbar 5%\r[PROGRESS:70] seventy\rtail> \n"
    b"> last prompt\r"
)


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 13])
def test_follower_same_state_whatever_the_split(tmp_path, step: int) -> None:
    """Markers, prompts, CR/LF pairs split across polls give the one-shot result."""
    whole = _follow(tmp_path / "whole", SPLIT_SAMPLE, None)
    assert whole.progress == Progress(70, "seventy")
    assert whole.result_offset == SPLIT_SAMPLE.index(b"[RESULT]")
    assert whole.prompt_end == SPLIT_SAMPLE.rindex(b"> last prompt") + 2
    assert whole.lines == 6
    assert _state(_follow(tmp_path / "split", SPLIT_SAMPLE, step)) == _state(whole)


@pytest.mark.parametrize("chunk", [4, 8, 16, 64])
def test_follower_marker_split_across_read_chunks(tmp_path, monkeypatch, chunk: int) -> None:
    """One poll, several reads: a marker cut by the read boundary is still found."""
    data = b"".join(b"line %d\n" % i for i in range(30)) + b"[PROGRESS:55] cut\n> q\nafter\n"
    expected = _state(_follow(tmp_path / "ref", data, None))
    monkeypatch.setattr(log_follower, "READ_CHUNK", chunk)
    monkeypatch.setattr(log_follower, "MAX_PARTIAL_LINE", 1 << 20)
    got = _follow(tmp_path / "chunked", data, None)
    assert _state(got) == expected
    assert got.progress == Progress(55, "cut") and got.lines == 33
    assert got.prompt_end == data.index(b"q\nafter")


def test_follower_pending_line_is_a_copy(tmp_path) -> None:
    """The partial line must survive other followers reusing the read buffer."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"[PROGRESS:1")
    b.write_bytes(b"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n")
    fa, fb = LogFollower(str(a)), LogFollower(str(b))
    fa.poll()
    fb.poll()
    with open(a, "ab") as out:
        out.write(b"0] ten\n")
    assert fa.poll() and fa.progress == Progress(10, "ten")


def test_follower_without_marker_bytes(tmp_path) -> None:
    """Output with no `[` and no `>` at all (base64, say): counts only."""
    p = tmp_path / "stdout"
    p.write_bytes(b"QUJDRA==\n" * 10_000 + b"tail")
    f = LogFollower(str(p))
    assert not f.poll()
    assert f.lines == 10_000 and f.progress is None
    assert f.result_offset is None and f.prompt_end is None
    f.finish()
    assert f.lines == 10_001


def test_summarize_tail(tmp_path) -> None:
    p = tmp_path / "stdout"
    filler = b"".join(b"filler %d\n" % i for i in range(20_000))
    # [RESULT] inside the window wins.
    p.write_bytes(b"> prompt\n" + filler + b"[RESULT] done\nmore\n")
    assert summarize_tail(str(p), window=4096) == "done\nmore"
    # None in the window: the one the follower saw earlier.
    p.write_bytes(b"[RESULT] early\n" + filler)
    f = LogFollower(str(p))
    f.poll(max_bytes=100)
    assert f.result_offset == 0
    assert summarize_tail(str(p), f, window=4096).startswith("early\nfiller 0")
    # Else what follows the last prompt in the window, else the tail.
    p.write_bytes(filler + b"> question\nthe answer\n")
    assert summarize_tail(str(p), LogFollower(str(p)), window=4096) == "question\nthe answer"
    p.write_bytes(filler)
    tail = summarize_tail(str(p), window=4096)
    assert tail.split("\n")[-1] == "filler 19999" and "filler 0\n" not in tail
    assert summarize_tail(str(tmp_path / "missing")) == ""


def test_a_line_of_many_markers_is_looked_at_once(tmp_path) -> None:
    """Each `[PROGRESS` of a line was looked at against the whole line, back to
    its start and on to its end: a command printing one line of thousands of
    them (a file a safe `cat` shows) held the host's loop 10 s for 64 KB, at
    the task's end. Only a line's first can be its marker; it still is."""
    p = tmp_path / "log"
    p.write_bytes(
        b"x[PROGRESSx[RESULT]" * 60_000 + b"\n" + b"[PROGRESS:40] half [PROGRESS" * 3 + b"\n"
    )
    f = LogFollower(str(p))
    answers(f.poll, deadline=20)
    assert f.progress is not None and f.progress.percent == 40
    assert f.progress.text.startswith("half [PROGRESS[PROGRESS:40]")
    summary = answers(lambda: summarize_file(str(p), max_bytes=8 << 20), deadline=20)
    assert summary is not None
