"""The MCP server's reader of stdin: lines bounded in size, requests with an
id MCP does not allow refused, over a real pipe."""

from __future__ import annotations

import os
import threading

import pytest
from sidekick_tools.mcp.lines import REFUSED, Lines, Refused, checked, claimed_stdin, top_id


async def read_all(data: bytes, limit: int) -> tuple[list[str], list]:
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    lines = Lines(r, limit)
    try:
        got = [line async for line in lines]
    finally:
        writer.join()
        os.close(r)
    return got, [(x.code, x.rid, x.message) for x in lines.refused]


async def test_lines_come_whole_across_pieces_and_the_last_needs_no_newline():
    body = b'{"a": "' + b"y" * 200_000 + b'"}\n'  # several reads of the pipe
    got, refused = await read_all(b"one\n" + body + b"\xff\nlast", 1 << 20)
    assert got == ["one\n", body.decode(), "\ufffd\n", "last"]
    assert refused == []


async def test_a_line_past_the_bound_is_dropped_and_the_next_read_as_ever():
    long = b'{"jsonrpc": "2.0", "id": "big-1", "params": {"x": "' + b"z" * 300_000 + b'"}}\n'
    got, refused = await read_all(b"before\n" + long + b"after\n" + long, 100_000)
    assert got == ["before\n", REFUSED, "after\n", REFUSED]
    why = "Invalid request: longer than 100000 bytes"
    assert refused == [(-32600, "big-1", why), (-32600, "big-1", why)]


async def test_a_line_of_exactly_the_bound_is_read():
    line = b"q" * 99_999 + b"\n"
    got, refused = await read_all(line, 100_000)
    assert got == [line.decode()] and refused == []


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', True),
        ('{"id": 1.0, "method": "ping"}', True),
        ('{"id": -3E2, "method": "ping"}', True),
        ('{"id": 12, "method": "ping"}', False),
        ('{"id": "null", "method": "ping"}', False),
        ('{"method": "notifications/initialized"}', False),
        ('{"jsonrpc": "2.0", "id": null, "error": {"code": -32700}}', False),  # a response
        ('{"method": "x", "params": {"id": null}}', False),  # not the request's own id
        ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', True),
        ('{"id": false, "method": "ping"}', True),
        ('{"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"}', True),
        ('{"id": [1], "method": "ping"}', True),
        ('{"id": {"x": 1}, "result": {}}', False),  # a response
        ('{"id": null, "params": {"a": 1}, "method": "late"}', True),  # its method after
        ('{"id": {"x": 1}, "method": ', False),  # no JSON: the SDK says so
        # the id after the params (JSON members have no order)
        ('{"jsonrpc": "2.0", "method": "m", "params": {"a": 1}, "id": true}', True),
        ('{"method": "m", "params": {"a": [1]}, "id": 1.5}', True),
        ('{"method": "m", "params": {"a": 1}, "id": 7}', False),
        ('{"method": "m", "params": {"id": null}}', False),  # a notification
    ],
)
def test_only_a_request_whose_own_id_is_no_string_or_integer_is_refused(line, refused):
    assert (checked(line) != line) is refused


def test_a_line_nested_past_the_bound_is_refused_with_its_id():
    """The SDK's parser reads about 250 levels: a request nested 100 deep went
    on to the tool, though the help says past 64 is refused."""
    deep = '{"a": ' * 100 + "1" + "}" * 100
    refused = checked('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ' + deep + "}")
    assert isinstance(refused, Refused) and refused.code == -32600 and refused.rid == 3
    within = '{"id": 4, "method": "m", "params": ' + "[" * 60 + "]" * 60 + "}"
    assert checked(within) == within


def test_the_id_of_a_line_is_read_from_its_head_only():
    assert top_id('{"jsonrpc": "2.0", "id": 7, "method": "m"') == 7
    assert top_id('{"id": "a\\"b", "params": {') == 'a"b'
    assert top_id('{"method": "m", "params": {"id": 9}, "id": 3') is None
    assert top_id('{"id": 1.5, "method": "m"}') is None


def test_stdin_is_the_null_device_while_claimed_and_comes_back_after():
    r, w = os.pipe()
    saved = os.dup(0)
    try:
        os.dup2(r, 0)
        with claimed_stdin() as fd:
            os.write(w, b"hello\n")
            assert os.read(0, 10) == b""  # fd 0: the null device
            assert os.read(fd, 10) == b"hello\n"  # the pipe, privately
        os.close(fd)  # left open by design: a reader thread may still wait on it
        os.write(w, b"again\n")
        assert os.read(0, 10) == b"again\n"
    finally:
        os.dup2(saved, 0)
        for fd in (saved, r, w):
            os.close(fd)
