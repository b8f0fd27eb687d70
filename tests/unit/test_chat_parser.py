"""Tests for sidekick_tools.chat.parser: the chat buffer format of DESIGN.md §4."""

from __future__ import annotations

import json
import textwrap

import pytest
from sidekick_tools.chat import MAX_BODY_BYTES, ROLES, Chat, parse

from tests.conftest import answers


def P(text: str) -> Chat:
    """Parse a dedented document; rows are its lines, 0-based."""
    return parse(textwrap.dedent(text).split("\n"))


DESIGN_EXAMPLE = """\
SYSTEM: You are helpful.
USER: Run the tests please.
ASSISTANT: I'll run the tests.

```tool run_terminal_command id=call_01
{"command": "pytest -q", "purpose": "Run the test suite"}
```

```result id=call_01 status=completed exit=0 duration=2.31s
12 passed in 2.10s
```
"""


# --------------------------------------------------------------------------- messages


def test_design_example_messages_calls_and_result():
    chat = P(DESIGN_EXAMPLE)
    assert [(m.role, m.start_row, m.end_row) for m in chat.messages] == [
        ("SYSTEM", 0, 0),
        ("USER", 1, 1),
        ("ASSISTANT", 2, 11),
    ]
    assert len(chat.calls) == 1
    call = chat.calls[0]
    assert chat.messages[2].calls == [call]
    assert call.tool == "run_terminal_command"
    assert call.call_id == "call_01"
    assert (call.start_row, call.end_row) == (4, 6)
    assert call.fence == "```"
    assert call.body == '{"command": "pytest -q", "purpose": "Run the test suite"}'
    assert call.closed
    assert call.message_index == 2
    assert call.params == {"command": "pytest -q", "purpose": "Run the test suite"}
    assert call.error is None
    assert not call.pending
    result = call.result
    assert result is not None
    assert result.call_id == "call_01"
    assert result.status == "completed"
    assert result.fields == {"exit": "0", "duration": "2.31s"}
    assert (result.start_row, result.end_row) == (8, 10)
    assert result.body == "12 passed in 2.10s"
    assert result.closed
    assert call.last_row == 10


def test_roles_constant():
    assert ROLES == ("SYSTEM", "USER", "ASSISTANT")


def test_text_before_first_marker_belongs_to_no_message_and_its_calls_are_ignored():
    chat = P(
        """\
        preamble
        ```tool run_terminal_command id=early
        {"command": "ls"}
        ```
        USER: hi
        """
    )
    assert [(m.role, m.start_row) for m in chat.messages] == [("USER", 4)]
    assert chat.calls == []
    assert chat.call_by_id("early") is None


def test_markers_only_at_column_zero_and_exact():
    chat = P(
        """\
        USER: hello
         ASSISTANT: indented, not a marker
        USERS: not a marker
        user: lowercase, not a marker
        ASSISTANT:no space is fine
        SYSTEM:
        """
    )
    assert [(m.role, m.start_row, m.end_row) for m in chat.messages] == [
        ("USER", 0, 3),
        ("ASSISTANT", 4, 4),
        ("SYSTEM", 5, 6),
    ]


def test_message_rows_are_contiguous_and_last_runs_to_end():
    lines = ["USER: a", "b", "", "ASSISTANT: c", "d", "USER:", ""]
    chat = parse(lines)
    assert [(m.start_row, m.end_row) for m in chat.messages] == [(0, 2), (3, 4), (5, 6)]


def test_empty_buffer():
    assert parse([]).messages == []
    assert parse([""]).messages == []
    assert parse([]).call_at(0) is None
    assert parse([]).last_assistant() is None


def test_role_markers_inside_fences_do_not_start_messages():
    chat = P(
        """\
        USER: look at this
        ```python
        ASSISTANT: not a marker
        USER: neither
        ```
        ```
        SYSTEM: nor this
        ```
        ASSISTANT: real
        """
    )
    assert [(m.role, m.start_row) for m in chat.messages] == [("USER", 0), ("ASSISTANT", 8)]


def test_marker_inside_tool_body_is_body_text():
    chat = P(
        """\
        ASSISTANT: writing a file
        ```tool write_file id=w
        {"path": "a.md",
        USER: "oops"}
        ```
        """
    )
    assert len(chat.messages) == 1
    assert chat.calls[0].body == '{"path": "a.md",\nUSER: "oops"}'


def test_unclosed_plain_fence_hides_markers_to_end_of_buffer():
    chat = P(
        """\
        USER: here
        ```
        ASSISTANT: hidden
        ```tool x id=a
        {}
        """
    )
    assert [m.role for m in chat.messages] == ["USER"]
    assert chat.messages[0].end_row == 5
    assert chat.calls == []


# --------------------------------------------------------------------------- fences


def test_longer_fence_contains_shorter_runs():
    chat = P(
        """\
        ASSISTANT: write
        `````tool write_file id=w
        {"path": "x.md", "content": "a\\n```\\nb"}
        ```
        ````
        USER: still inside the five-backtick block
        `````
        """
    )
    assert [m.role for m in chat.messages] == ["ASSISTANT"]
    call = chat.calls[0]
    assert call.fence == "`````"
    assert (call.start_row, call.end_row) == (1, 6)
    assert call.closed
    assert call.body.split("\n")[1:] == [
        "```",
        "````",
        "USER: still inside the five-backtick block",
    ]


def test_closing_fence_may_be_longer_and_have_trailing_whitespace():
    chat = P("ASSISTANT: x\n```tool a id=1\n{}\n`````  \t\n```tool b id=2\n{}\n````\n")
    assert [(c.tool, c.start_row, c.end_row, c.closed) for c in chat.calls] == [
        ("a", 1, 3, True),
        ("b", 4, 6, True),
    ]
    assert all(c.params == {} and c.error is None for c in chat.calls)


def test_line_with_text_after_backticks_does_not_close():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=1
        {"s": 1}
        ``` not a close
        ```python
        ```
        """
    )
    call = chat.calls[0]
    assert call.end_row == 5  # "```python" inside a block is text too
    assert call.body == '{"s": 1}\n``` not a close\n```python'
    assert call.error is not None and "Malformed JSON" in call.error


def test_shorter_run_does_not_close_longer_fence():
    chat = P("ASSISTANT: x\n````tool a\n{}\n```\n")
    call = chat.calls[0]
    assert not call.closed
    assert call.body == "{}\n```\n"


def test_indented_fence_is_not_a_fence():
    chat = P(
        """\
        ASSISTANT: x
          ```tool run_terminal_command id=a
          {"command": "ls"}
          ```
        USER: y
        """
    )
    assert chat.calls == []
    assert [m.role for m in chat.messages] == ["ASSISTANT", "USER"]


def test_info_string_with_backtick_is_not_an_opener():
    chat = P(
        """\
        ASSISTANT: inline ```code``` here
        ```tool`x id=a
        {}
        USER: real message
        """
    )
    assert chat.calls == []
    assert [m.role for m in chat.messages] == ["ASSISTANT", "USER"]


def test_tool_body_with_opener_looking_line_is_closed_by_next_fence():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=1
        ```python
        ```
        USER: after
        """
    )
    call = chat.calls[0]
    assert (call.end_row, call.closed, call.body) == (3, True, "```python")
    assert [m.role for m in chat.messages] == ["ASSISTANT", "USER"]


# --------------------------------------------------------------------------- tool calls


def test_unclosed_tool_fence_at_eof():
    lines = ["ASSISTANT: go", "````tool run_terminal_command id=call_9", '{"command":', '"ls"}']
    chat = parse(lines)
    call = chat.calls[0]
    assert not call.closed
    assert call.end_row == 3
    assert call.body == '{"command":\n"ls"}'
    assert call.params == {"command": "ls"}
    assert call.error is not None
    assert call.error.startswith("Unclosed fence")
    assert "add a line ```` to end the tool call" in call.error
    assert "line 2" in call.error
    assert call.pending
    assert call.last_row == 3
    assert chat.messages[0].end_row == 3


def test_unclosed_tool_header_on_last_line():
    chat = parse(["ASSISTANT: go", "```tool x id=a"])
    call = chat.calls[0]
    assert (call.start_row, call.end_row, call.body, call.closed) == (1, 1, "", False)
    assert call.error is not None and call.error.startswith("Unclosed fence")
    assert call.params is None


def test_missing_tool_name():
    chat = P("ASSISTANT: x\n```tool\n{}\n```\n```tool id=c2\n{}\n```\n")
    first, second = chat.calls
    assert first.tool == "" and first.call_id is None
    assert first.error is not None and first.error.startswith("Missing tool name")
    assert "```tool NAME" in first.error
    assert second.tool == "" and second.call_id == "c2"
    assert second.error is not None and second.error.startswith("Missing tool name")
    assert first.params == {} and second.params == {}


def test_header_tokens_are_tolerant():
    chat = P(
        """\
        ASSISTANT: x
        ```tool   run_terminal_command\tid=call_01  extra=1 flag
        {}
        ```
        ``` tool read_files id=r
        {}
        ```
        ```tool list_directory id=
        {}
        ```
        ```toolbox x id=t
        {}
        ```
        """
    )
    assert [(c.tool, c.call_id) for c in chat.calls] == [
        ("run_terminal_command", "call_01"),
        ("read_files", "r"),
        ("list_directory", None),
    ]
    assert all(c.error is None for c in chat.calls)


def test_tool_blocks_outside_assistant_messages_are_ignored():
    chat = P(
        """\
        SYSTEM: example
        ```tool run_terminal_command id=s1
        {"command": "rm -rf /"}
        ```
        USER: please run
        ```tool run_terminal_command id=u1
        {"command": "ls"}
        ```

        ```result id=u1 status=completed
        ok
        ```
        ASSISTANT: sure
        ```tool run_terminal_command id=a1
        {"command": "ls"}
        ```
        """
    )
    assert [c.call_id for c in chat.calls] == ["a1"]
    assert chat.messages[0].calls == [] and chat.messages[1].calls == []
    assert chat.calls[0].message_index == 2


def test_malformed_json_reports_line_and_column_in_block():
    chat = P(
        """\
        ASSISTANT: x
        ```tool run_terminal_command id=a
        {"command": "ls",
         "purpose": "x",}
        ```
        """
    )
    call = chat.calls[0]
    assert call.params is None
    assert call.error is not None
    assert call.error.startswith("Malformed JSON")
    assert "line 2, column" in call.error
    # no row of the buffer: the block moves as results are written above it
    # (and the message goes into its result, which stays)
    assert "buffer line" not in call.error


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("[1, 2]", "an array"),
        ('"ls"', "a string"),
        ("42", "a number"),
        ("1.5", "a number"),
        ("null", "null"),
        ("true", "a boolean"),
    ],
)
def test_body_not_an_object(body, kind):
    chat = parse(["ASSISTANT: x", "```tool a id=1", body, "```"])
    call = chat.calls[0]
    assert call.params is None
    assert call.error is not None
    assert call.error.startswith("Tool call body must be a JSON object")
    assert f"not {kind}:" in call.error


@pytest.mark.parametrize("body", [[], [""], ["   ", "\t"]])
def test_empty_body(body):
    chat = parse(["ASSISTANT: x", "```tool a id=1", *body, "```"])
    call = chat.calls[0]
    assert call.params is None
    assert call.error is not None and call.error.startswith("Empty tool call body")


def test_duplicate_ids_flag_second_and_later_occurrences():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=call_01
        {}
        ```
        ```tool b id=call_01
        {"x": 1}
        ```
        USER: more
        ASSISTANT: y
        ```tool c id=call_01
        {}
        ```
        ```tool d id=call_02
        {}
        ```
        """
    )
    a, b, c, d = chat.calls
    assert a.error is None
    assert b.error is not None
    assert b.error.startswith("Duplicate id call_01: already used at line 2")
    assert c.error is not None
    assert c.error.startswith("Duplicate id call_01: already used at line 2")
    assert d.error is None
    assert b.params == {"x": 1}  # the body is still decoded
    assert chat.call_by_id("call_01") is a


def test_calls_outside_assistant_messages_do_not_count_as_duplicates():
    chat = P("USER: x\n```tool a id=k\n{}\n```\nASSISTANT: y\n```tool a id=k\n{}\n```\n")
    assert [(c.call_id, c.error) for c in chat.calls] == [("k", None)]


def test_error_order_first_problem_wins():
    chat = P("ASSISTANT: x\n```tool\n[1]\n```\n```tool a id=q\n[1]\n```\n```tool b id=q\n[\n```\n")
    assert chat.calls[0].error.startswith("Missing tool name")
    assert chat.calls[1].error.startswith("Tool call body must be a JSON object")
    assert chat.calls[2].error.startswith("Duplicate id q")


def test_ten_megabyte_parameter_is_refused_without_decoding():
    big = json.dumps({"content": "x" * (10 * 1024 * 1024)})
    chat = parse(["ASSISTANT: x", "```tool write_file id=w", big, "```", "USER: next"])
    call = chat.calls[0]
    assert call.closed and call.end_row == 3
    assert call.params is None
    assert call.error is not None
    assert call.error.startswith("Tool call body too large")
    assert "1 MiB" in call.error
    assert [m.role for m in chat.messages] == ["ASSISTANT", "USER"]


def test_body_size_limit_counts_utf8_bytes():
    under = json.dumps({"c": "x" * (MAX_BODY_BYTES - 100)})
    assert len(under.encode()) <= MAX_BODY_BYTES
    multibyte = json.dumps({"c": "é" * (MAX_BODY_BYTES * 3 // 5)}, ensure_ascii=False)
    assert len(multibyte) <= MAX_BODY_BYTES < len(multibyte.encode())
    chat = parse(
        ["ASSISTANT: x", "```tool a id=1", under, "```", "```tool b id=2", multibyte, "```"]
    )
    ok, too_big = chat.calls
    assert (
        ok.error is None and ok.params is not None and len(ok.params["c"]) == MAX_BODY_BYTES - 100
    )
    assert too_big.params is None
    assert too_big.error is not None and too_big.error.startswith("Tool call body too large")


# --------------------------------------------------------------------------- results


def test_result_directly_after_call_and_after_blank_lines():
    lines = [
        "ASSISTANT: x",
        "```tool a id=1",
        "{}",
        "```",
        "```result id=1 status=completed",
        "```",
        "```tool b id=2",
        "{}",
        "```",
        "",
        "\t",
        "   ",
        "```result id=2 status=failed exit=1",
        "boom",
        "```",
    ]
    chat = parse(lines)
    a, b = chat.calls
    assert a.result is not None and (a.result.start_row, a.result.end_row) == (4, 5)
    assert a.result.body == ""
    assert b.result is not None and b.result.status == "failed"
    assert b.result.fields == {"exit": "1"}
    assert b.result.body == "boom"
    assert b.last_row == 14


def test_text_between_call_and_result_detaches_result():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=1
        {}
        ```
        some words
        ```result id=1 status=completed
        ok
        ```
        """
    )
    assert chat.calls[0].result is None
    assert chat.calls[0].pending


def test_role_marker_between_call_and_result_detaches_result():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=1
        {}
        ```
        USER:
        ```result id=1 status=completed
        ```
        """
    )
    assert chat.calls[0].result is None


@pytest.mark.parametrize(
    ("call_id", "result_id", "attached"),
    [
        ("id=1", "id=1", True),
        ("id=1", "id=2", False),
        ("", "", True),
        ("", "id=1", False),
        ("id=1", "", False),
    ],
)
def test_result_id_must_match(call_id, result_id, attached):
    chat = parse(
        [
            "ASSISTANT: x",
            f"```tool a {call_id}",
            "{}",
            "```",
            f"```result {result_id} status=completed",
            "body",
            "```",
        ]
    )
    assert (chat.calls[0].result is not None) == attached
    assert chat.calls[0].last_row == (6 if attached else 3)


def test_mismatched_result_still_hides_its_content():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=1
        {}
        ```
        ```result id=zzz status=completed
        USER: inside result
        ```
        """
    )
    assert len(chat.messages) == 1
    assert chat.calls[0].result is None


def test_only_the_first_result_belongs_to_the_call():
    chat = P(
        """\
        ASSISTANT: x
        ```tool a id=1
        {}
        ```
        ```result id=1 status=running task=abc123
        running
        ```
        ```result id=1 status=completed
        done
        ```
        """
    )
    result = chat.calls[0].result
    assert result is not None
    assert (result.status, result.fields, result.end_row) == ("running", {"task": "abc123"}, 6)


def test_result_fields_and_raw_status():
    chat = parse(
        [
            "ASSISTANT: x",
            "```tool run_terminal_command id=c",
            "{}",
            "```",
            "````result  id=c status=weird exit=124 reason=timeout duration=30.00s junk x=1=2",
            "```",
            "````",
        ]
    )
    result = chat.calls[0].result
    assert result is not None
    assert result.status == "weird"
    assert result.fields == {
        "exit": "124",
        "reason": "timeout",
        "duration": "30.00s",
        "x": "1=2",
    }
    assert result.body == "```"


def test_unclosed_result_runs_to_end():
    chat = parse(["ASSISTANT: x", "```tool a", "{}", "```", "```result status=running", "out"])
    result = chat.calls[0].result
    assert result is not None
    assert (result.closed, result.end_row, result.body, result.call_id) == (False, 5, "out", None)
    assert chat.calls[0].last_row == 5


def test_result_after_unclosed_call_is_part_of_its_body():
    chat = parse(["ASSISTANT: x", "```tool a id=1", "{}", "```result id=1 status=completed"])
    call = chat.calls[0]
    assert not call.closed and call.result is None


# --------------------------------------------------------------------------- CRLF, NUL


def test_crlf_lines_parse_like_lf_lines():
    lf = DESIGN_EXAMPLE.split("\n")
    crlf = [s + "\r" for s in lf]
    a, b = parse(lf), parse(crlf)
    assert [(m.role, m.start_row, m.end_row) for m in a.messages] == [
        (m.role, m.start_row, m.end_row) for m in b.messages
    ]
    ca, cb = a.calls[0], b.calls[0]
    assert ca == cb
    assert "\r" not in cb.body
    assert cb.result is not None and cb.result.body == "12 passed in 2.10s"
    assert cb.result.fields == {"exit": "0", "duration": "2.31s"}


def test_crlf_blank_lines_between_call_and_result():
    lines = [
        "ASSISTANT: x\r",
        "```tool a id=1\r",
        "{}\r",
        "```\r",
        "\r",
        "```result id=1 status=ok\r",
    ]
    lines += ["```\r"]
    chat = parse(lines)
    assert chat.calls[0].result is not None


def test_line_containing_newline_keeps_rows_right():
    # Neovim represents NUL bytes in buffer lines as "\n".
    lines = ["USER: a\nb", "ASSISTANT: x\n```tool a", "```tool a id=1", "{}", "```", "USER: z"]
    chat = parse(lines)
    assert [(m.role, m.start_row, m.end_row) for m in chat.messages] == [
        ("USER", 0, 0),
        ("ASSISTANT", 1, 4),
        ("USER", 5, 5),
    ]
    assert [(c.start_row, c.end_row, c.params) for c in chat.calls] == [(2, 4, {})]


# --------------------------------------------------------------------------- queries


QUERY_DOC = """\
USER: go
ASSISTANT: first
```tool a id=1
{}
```

```result id=1 status=completed
ok
```
between
```tool b id=2
{}
```
USER: thanks
"""


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (0, None),  # user message
        (1, None),  # assistant text
        (2, "1"),  # header
        (3, "1"),  # body
        (4, "1"),  # closing fence
        (5, "1"),  # blank line between call and result
        (6, "1"),  # result header
        (8, "1"),  # result closing fence
        (9, None),  # text between calls
        (10, "2"),
        (12, "2"),
        (13, None),  # after the last call
        (-1, None),
        (1000, None),
    ],
)
def test_call_at(row, expected):
    call = P(QUERY_DOC).call_at(row)
    assert (call.call_id if call else None) == expected


def test_call_at_unclosed_runs_to_end():
    chat = parse(["ASSISTANT: x", "```tool a", "{}", "", "more"])
    assert chat.call_at(4) is chat.calls[0]
    assert chat.call_at(0) is None


def test_last_assistant():
    chat = P(QUERY_DOC)
    last = chat.last_assistant()
    assert last is chat.messages[1]
    assert [c.call_id for c in last.calls] == ["1", "2"]
    assert P("USER: only\n").last_assistant() is None
    two = P("ASSISTANT: a\nUSER: b\nASSISTANT: c\n")
    assert two.last_assistant() is two.messages[2]


def test_call_by_id_and_pending():
    chat = P(QUERY_DOC)
    assert chat.call_by_id("2") is chat.calls[1]
    assert chat.call_by_id("nope") is None
    assert [c.pending for c in chat.calls] == [False, True]
    assert chat.calls[1].last_row == chat.calls[1].end_row == 12


# --------------------------------------------------------------------------- scale


def _big_buffer(n_lines: int, n_calls: int) -> tuple[list[str], int]:
    lines: list[str] = []
    with_result = 0
    i = 0
    filler = n_lines // n_calls - 12
    while i < n_calls:
        lines.append(f"USER: request {i}")
        lines.extend(f"user text {k}" for k in range(filler // 2))
        lines.append(f"ASSISTANT: answer {i}")
        lines.extend(["```python", "USER: not a marker", "```"])
        lines.extend(f"assistant text {k}" for k in range(filler - filler // 2))
        lines.append(f"```tool run_terminal_command id=call_{i:06x}")
        lines.append(json.dumps({"command": f"echo {i}", "purpose": "test"}))
        lines.append("```")
        if i % 3:
            lines.append("")
            lines.append(f"```result id=call_{i:06x} status=completed exit=0 duration=0.01s")
            lines.append(f"{i}")
            lines.append("```")
            with_result += 1
        i += 1
    return lines, with_result


def test_large_buffer_counts():
    lines, with_result = _big_buffer(100_000, 2_000)
    assert 90_000 < len(lines) <= 100_000
    chat = parse(lines)
    assert len(chat.calls) == 2_000
    assert len(chat.messages) == 4_000
    assert sum(1 for c in chat.calls if c.result is not None) == with_result
    assert all(c.error is None for c in chat.calls)
    assert chat.calls[1234].params == {"command": "echo 1234", "purpose": "test"}
    probe = chat.calls[1500]
    assert chat.call_at(probe.start_row + 1) is probe
    assert chat.call_by_id("call_0005dc") is probe
    assert chat.last_assistant() is chat.messages[-1]
    assert chat.messages[-1].end_row == len(lines) - 1


def test_deeply_nested_json_is_that_calls_problem_only():
    deep = "[" * 100_000 + "]" * 100_000
    lines = [
        "ASSISTANT: x",
        "```tool read_files id=a",
        '{"paths": ' + deep + "}",
        "```",
        "```tool read_files id=b",
        '{"paths": ["ok.txt"]}',
        "```",
        "```tool read_files id=c",
        '{"paths": ["[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["]}',
        "```",
    ]
    chat = parse(lines)
    a, b, c = chat.calls
    assert "nested too deeply" in a.error and "64" in a.error
    assert b.error is None and b.params == {"paths": ["ok.txt"]}
    # brackets inside strings do not count
    assert c.error is None and c.params["paths"][0].startswith("[[[")


@pytest.mark.parametrize("unit", ['\\"', '\\\n"', '"'])
def test_a_body_with_a_string_never_closed_is_read_without_holding_the_host(unit):
    """Every quote of an unclosed string (`\\"`) started a scan of the rest of
    the body again: a malformed call of 80 KB in a chat held the host 30 s,
    and the editor with it. Its depth counts the brackets before the string."""
    from sidekick_tools.chat.call_body import MAX_JSON_DEPTH, json_depth, read_params

    body = "{" * (MAX_JSON_DEPTH + 1) + '"' + unit * 200_000
    assert answers(lambda: json_depth(body), deadline=20) == MAX_JSON_DEPTH + 1
    params, problem = answers(lambda: read_params(body), deadline=20)
    assert params is None and "nested too deeply" in problem
    assert json_depth('{"a": "b\\' + "[" * 70) == 1  # a string to the end, one last backslash


def test_json_depth_counts_nesting_not_brackets_in_strings():
    from sidekick_tools.chat.call_body import MAX_JSON_DEPTH, json_depth

    assert json_depth('{"a": [1, {"b": 2}]}') <= 3
    nested = "[" * 70 + "]" * 70
    assert json_depth(nested) == 70
    assert json_depth('"' + "[" * 100 + '"') <= MAX_JSON_DEPTH
    assert json_depth('["\\"[[[[", ' + "[" * 65 + "]" * 65 + "]") == 66


def test_json_depth_is_the_deepest_nesting_outside_strings():
    """Against a scan written out here, one character at a time, on random texts
    of brackets, strings, escapes and unclosed quotes."""
    import random

    from sidekick_tools.chat.call_body import MAX_JSON_DEPTH, json_depth

    def scanned(text):
        depth = deepest = 0
        i = 0
        while i < len(text):
            c = text[i]
            if c == '"':  # a string, to its closing quote or the end
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif c in "[{":
                depth += 1
                deepest = max(deepest, depth)
            elif c in "]}":
                depth -= 1
            i += 1
        return deepest

    rng = random.Random(5)
    pieces = ["[", "{", "]", "}", '"', "\\", "a", ",", ":", "[" * 40, "]" * 30]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))
        if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
            assert json_depth(text) == scanned(text), text
        else:
            assert json_depth(text) >= scanned(text), text


def test_a_malformed_body_says_where_in_the_json_words_of_its_own():
    from sidekick_tools.chat.call_body import read_params

    _, error = read_params('{"path": "cut here')
    assert error == (
        "Malformed JSON in tool call body: Unterminated string starting at: line 1, "
        "column 10 of the block"
    )


def test_a_body_that_names_a_parameter_twice_is_refused():
    """JSON takes the last of two keys alike: a chat file's call that shows
    `"command": "git status"` first and another command below it would run the
    one the reader did not see first. Each parameter is written once."""
    from sidekick_tools.chat.call_body import read_params

    body = '{"command": "git status",\n "purpose": "look",\n "command": "rm -rf ~"}'
    params, error = read_params(body)
    assert params is None
    assert error == (
        'Malformed JSON in tool call body: the key "command" is written twice; write each key once'
    )
    nested = read_params('{"edits": [{"old": "a", "new": "b", "old": "c"}]}')
    assert nested[0] is None and 'the key "old" is written twice' in nested[1]
    assert read_params('{"a": {"b": 1}, "b": {"a": 2}}') == ({"a": {"b": 1}, "b": {"a": 2}}, None)
