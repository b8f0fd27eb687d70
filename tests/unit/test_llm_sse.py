"""The incremental SSE decoder: the standard's rules, and chunks split anywhere."""

from __future__ import annotations

import random

import pytest
from sidekick_tools.llm.sse import SSEDecoder, SSEEvent


def decode(*chunks: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.close())
    return out


def test_event_name_data_and_default_type():
    events = decode(b'event: ping\ndata: {"type": "ping"}\n\ndata: plain\n\n')
    assert events == [
        SSEEvent("ping", '{"type": "ping"}'),
        SSEEvent("message", "plain"),
    ]


def test_multiline_data_joined_with_newlines():
    events = decode(b"data: one\ndata:two\ndata\ndata:  three\n\n")
    assert events == [SSEEvent("message", "one\ntwo\n\n three")]


def test_comments_and_unknown_fields_are_ignored():
    events = decode(b": keep-alive\nfoo: bar\ndata: x\n: another\n\n")
    assert events == [SSEEvent("message", "x")]


def test_event_without_data_is_not_dispatched_and_its_name_forgotten():
    events = decode(b"event: lonely\n\ndata: after\n\n")
    assert events == [SSEEvent("message", "after")]


def test_id_persists_and_nul_id_is_ignored():
    events = decode(b"id: 7\ndata: a\n\ndata: b\n\nid: bad\x00\ndata: c\n\nid\ndata: d\n\n")
    assert [(e.data, e.id) for e in events] == [("a", "7"), ("b", "7"), ("c", "7"), ("d", "")]


def test_retry_takes_only_digits():
    events = decode(b"retry: 1500\ndata: a\n\nretry: 15x\ndata: b\n\n")
    assert [e.retry for e in events] == [1500, None]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(eol):
    stream = eol.join([b"event: e", b"data: 1", b"data: 2", b"", b"data: 3", b"", b""])
    assert decode(stream) == [SSEEvent("e", "1\n2"), SSEEvent("message", "3")]


def test_mixed_line_endings_in_one_stream():
    events = decode(b"data: a\r\n\rdata: b\n\r\n")
    assert events == [SSEEvent("message", "a"), SSEEvent("message", "b")]


def test_incomplete_event_at_close_is_discarded():
    assert decode(b"data: done\n\ndata: cut") == [SSEEvent("message", "done")]
    assert decode(b"data: cut\n") == []


def test_lone_cr_at_the_very_end_still_ends_its_line():
    # "data: x" CR, then close: the CR ended the line, but the blank line never came
    assert decode(b"data: x\r\r") == [SSEEvent("message", "x")]
    assert decode(b"data: x\r") == []


def test_byte_order_mark_is_skipped_once():
    assert decode(b"\xef\xbb\xbfdata: a\n\n") == [SSEEvent("message", "a")]
    assert decode(b"\xef", b"\xbb", b"\xbfdata: a\n\n") == [SSEEvent("message", "a")]
    # only at the start: later it is part of the field name, which is then unknown
    assert decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent("message", "a")]


def test_invalid_utf8_becomes_replacement_characters():
    assert decode(b"data: \xff ok\n\n") == [SSEEvent("message", "\ufffd ok")]


SAMPLE = (
    "event: message_start\r\n"
    'data: {"type":"message_start"}\r\n'
    "\r\n"
    ": comment with ünïcödé\n"
    "event: content_block_delta\n"
    'data: {"text":"héllo wörld ✓ 🎉"}\n'
    "data: second line\n"
    "\n"
    "id: 42\r"
    "data: cr only\r"
    "\r"
    "event: ping\n"
    "data: {}\n"
    "\n"
).encode()


def test_chunk_boundary_anywhere_gives_the_same_events():
    expected = decode(SAMPLE)
    assert len(expected) == 4
    assert expected[1].data == '{"text":"héllo wörld ✓ 🎉"}\nsecond line'
    for cut in range(len(SAMPLE) + 1):
        assert decode(SAMPLE[:cut], SAMPLE[cut:]) == expected, cut
    for cut1 in range(0, len(SAMPLE), 7):
        for cut2 in range(cut1, len(SAMPLE) + 1, 5):
            assert decode(SAMPLE[:cut1], SAMPLE[cut1:cut2], SAMPLE[cut2:]) == expected


def test_one_byte_at_a_time_and_random_chunks():
    expected = decode(SAMPLE)
    assert decode(*[SAMPLE[i : i + 1] for i in range(len(SAMPLE))]) == expected
    rng = random.Random(7)
    for _ in range(200):
        chunks, pos = [], 0
        while pos < len(SAMPLE):
            size = rng.randint(1, 12)
            chunks.append(SAMPLE[pos : pos + size])
            pos += size
        assert decode(*chunks) == expected


def test_feed_returns_events_as_soon_as_their_blank_line_arrives():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\n") == [SSEEvent("message", "a")]
    assert decoder.feed(b"") == []
    # a CR at a chunk end ends its line at once; a LF starting the next chunk
    # is its other half (CRLF), not a second, blank line
    assert decoder.feed(b"data: b\r\n\r") == [SSEEvent("message", "b")]
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"data: c\r") == []
    assert decoder.feed(b"\n\n") == [SSEEvent("message", "c")]
