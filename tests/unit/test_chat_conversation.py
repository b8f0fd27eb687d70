"""Reading a chat buffer into the neutral conversation."""

from __future__ import annotations

import textwrap

from sidekick_tools.chat.blocks import Text, Thinking, ToolResultBlock, ToolUse, Turn
from sidekick_tools.chat.conversation import read_chat, read_front_matter, unanswered_calls
from sidekick_tools.chat.parser import parse
from sidekick_tools.chat.render import notice_lines, result_lines


def lines_of(text: str) -> list[str]:
    return textwrap.dedent(text).strip("\n").split("\n")


def test_front_matter_system_and_turns():
    lines = lines_of(
        """
        ---
        model: anthropic/claude-sonnet-4-5
        max_tokens: 1024
        title: "quoted value"
        ---
        SYSTEM: You are terse.
        Second line.

        USER: Hello
        there

        ASSISTANT: Hi!

        USER:   spaced
        """
    )
    doc = read_chat(lines)
    assert doc.front is not None
    assert doc.front.values == {
        "model": "anthropic/claude-sonnet-4-5",
        "max_tokens": "1024",
        "title": "quoted value",
    }
    assert doc.front.end_row == 4
    assert doc.conversation.system == "You are terse.\nSecond line."
    assert doc.conversation.turns == [
        Turn("user", [Text("Hello\nthere")]),
        Turn("assistant", [Text("Hi!")]),
        Turn("user", [Text("  spaced")]),
    ]


def test_front_matter_is_optional_and_must_close_before_the_first_message():
    assert read_front_matter(["USER: hi"]) is None
    assert read_front_matter(["---", "model: a/b"]) is None
    lines = ["---", "model: a/b", "USER: hi", "---"]
    assert read_front_matter(lines, parse(lines)) is None
    assert read_front_matter(["---", "not a pair", "k: v", "---"]).values == {"k": "v"}


def test_tool_results_come_first_in_the_next_user_turn_then_text():
    lines = [
        "USER: run it",
        "ASSISTANT: Sure.",
        "```tool run_terminal_command id=toolu_1",
        '{"command": "ls"}',
        "```",
        *result_lines("toolu_1", "completed", {"exit": 0, "duration": 1.5}, "a\nb"),
        "```tool read_files id=toolu_2",
        '{"paths": ["x"]}',
        "```",
        "",
        *result_lines("toolu_2", "denied", {}, "not run: the user replied instead"),
        "",
        "USER: and now?",
    ]
    doc = read_chat(lines)
    assert doc.unanswered == []
    assert doc.conversation.turns == [
        Turn("user", [Text("run it")]),
        Turn(
            "assistant",
            [
                Text("Sure."),
                ToolUse("toolu_1", "run_terminal_command", {"command": "ls"}),
                ToolUse("toolu_2", "read_files", {"paths": ["x"]}),
            ],
        ),
        Turn(
            "user",
            [
                ToolResultBlock("toolu_1", "status=completed exit=0 duration=1.50s\na\nb"),
                ToolResultBlock(
                    "toolu_2",
                    "status=denied\nnot run: the user replied instead",
                    is_error=True,
                    status="denied",
                ),
                Text("and now?"),
            ],
        ),
    ]


def test_results_without_user_text_and_an_assistant_reply_right_after():
    lines = [
        "USER: go",
        "ASSISTANT:",
        "```tool list_directory id=c1",
        '{"path": "."}',
        "```",
        *result_lines("c1", "failed", {"exit": 2}, ""),
        "ASSISTANT: Done.",
        "USER: ",
    ]
    turns = read_chat(lines).conversation.turns
    assert [t.role for t in turns] == ["user", "assistant", "user", "assistant"]
    assert turns[2].blocks == [ToolResultBlock("c1", "status=failed exit=2", True, "failed")]
    assert turns[3].blocks == [Text("Done.")]


def test_same_role_messages_merge_and_empty_messages_vanish():
    lines = ["USER: a", "USER: b", "ASSISTANT:", "", "USER: c", "ASSISTANT: x", "ASSISTANT: y"]
    assert read_chat(lines).conversation.turns == [
        Turn("user", [Text("a"), Text("b"), Text("c")]),
        Turn("assistant", [Text("x"), Text("y")]),
    ]


def test_completion_notices_are_plain_user_text():
    notice = notice_lines({"id": "abc123", "status": "completed", "output": "done"})
    lines = ["USER: start it", "ASSISTANT: Started.", "", *notice, "USER: "]
    turns = read_chat(lines).conversation.turns
    assert turns[-1].role == "user"
    (text,) = turns[-1].blocks
    assert text.text.startswith("[sidekick task abc123 completed]\n```json\n{")
    assert '"output": "done"' in text.text


def test_unanswered_calls_are_listed_pending_and_id_less():
    lines = [
        "USER: x",
        "ASSISTANT: calls",
        "```tool read_files id=c1",
        '{"paths": ["a"]}',
        "```",
        *result_lines("c1", "completed", {}, "ok"),
        "```tool read_files id=c2",
        '{"paths": ["b"]}',
        "```",
        "```tool read_files",
        '{"paths": ["c"]}',
        "```",
    ]
    chat = parse(lines)
    pending = unanswered_calls(chat)
    assert [(c.call_id, c.start_row) for c in pending] == [("c2", 8), (None, 11)]
    assert read_chat(lines, chat).unanswered == pending


def test_thinking_blocks_in_assistant_messages_only_and_code_blocks_stay_text():
    lines = [
        "USER:",
        "```thinking signature=x",
        "not thinking: a user's fence",
        "```",
        "ASSISTANT:",
        "```thinking signature=sig1",
        "deep",
        "```",
        "Text with code:",
        "````md",
        "```thinking signature=inside-code",
        "```",
        "````",
        "```thinking_notes",
        "a code block named thinking_notes",
        "```",
        "```thinking redacted=REDACTED==",
        "```",
        "USER: ok",
    ]
    doc = read_chat(lines)
    user, assistant, _ = doc.conversation.turns
    assert user.blocks == [Text("```thinking signature=x\nnot thinking: a user's fence\n```")]
    assert assistant.blocks[0] == Thinking("deep", "sig1")
    assert assistant.blocks[1] == Text("\n".join(lines[8:16]))
    assert assistant.blocks[2].data == "REDACTED=="
    assert doc.thinking_rows == [(5, 7), (16, 17)]


def test_an_unclosed_thinking_block_runs_to_the_end():
    lines = ["USER: q", "ASSISTANT:", "```thinking", "half", "USER: inside the fence"]
    doc = read_chat(lines)
    assert doc.conversation.turns[-1].blocks == [Thinking("half\nUSER: inside the fence", "")]


def test_text_before_the_first_message_is_not_sent():
    lines = ["# My chat", "notes", "USER: hi"]
    assert read_chat(lines).conversation.turns == [Turn("user", [Text("hi")])]


def test_a_call_with_bad_json_reads_as_an_empty_input():
    lines = ["USER: q", "ASSISTANT:", "```tool run_terminal_command id=c1", "{oops", "```"]
    lines += result_lines("c1", "failed", {}, "Malformed JSON")
    (_, assistant, results) = read_chat(lines).conversation.turns
    assert assistant.blocks == [ToolUse("c1", "run_terminal_command", {})]
    assert results.blocks[0].is_error
