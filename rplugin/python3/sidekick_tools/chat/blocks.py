"""The neutral conversation model, shared by the chat buffer and every provider.

A chat is read into a :class:`Conversation` (system text and alternating
:class:`Turn` s of content blocks); each provider module turns that into its wire
format. A streamed reply arrives as *deltas* (also defined here, since the chat
renderer consumes them), which :class:`sidekick_tools.chat.reply.ReplyBuilder`
accumulates back into blocks.

Pure Python, no Neovim, no HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Union

# --- content blocks -------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    """Reasoning the model showed. ``signature`` is what Anthropic needs to accept it
    back; thinking without one (other providers' reasoning) is never sent back."""

    text: str
    signature: str = ""


@dataclass(frozen=True)
class RedactedThinking:
    """Encrypted reasoning (Anthropic ``redacted_thinking``): opaque, sent back as is."""

    data: str


@dataclass(frozen=True)
class ToolUse:
    call_id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class ToolResultBlock:
    """A call's result. ``content`` is what the model reads: the result block's
    status line (``status=completed exit=0 ...``), then its body."""

    call_id: str
    content: str
    is_error: bool = False
    status: str = "completed"


Block = Union[Text, Thinking, RedactedThinking, ToolUse, ToolResultBlock]

USER = "user"
ASSISTANT = "assistant"


@dataclass
class Turn:
    role: str  # USER | ASSISTANT
    blocks: list[Block] = field(default_factory=list)
    #: What was made of this turn for a request (its masked form, its encoding),
    #: kept with it: the turns :func:`~.conversation.read_chat` gives are made
    #: once and never changed after.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class Conversation:
    """What a provider module serialises: system text, then turns that alternate
    user/assistant. In a user turn the tool results come first, then any text."""

    system: str | None
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it (built from ``tools.REGISTRY`` entries)."""

    name: str
    description: str
    schema: dict[str, Any]

    @classmethod
    def of(cls, tool: Any) -> ToolSpec:
        return cls(tool.name, tool.description, dict(tool.schema))


# --- streamed deltas --------------------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    """Text appended to the current text block (a new one after any other block)."""

    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    """Reasoning text appended to the current thinking block (a new one if none)."""

    text: str


@dataclass(frozen=True)
class SignatureDelta:
    """The current thinking block's signature (it replaces any earlier one)."""

    signature: str


@dataclass(frozen=True)
class RedactedThinkingDelta:
    """A whole redacted thinking block."""

    data: str


@dataclass(frozen=True)
class BlockEnd:
    """The current text or thinking block is complete."""


@dataclass(frozen=True)
class ToolCallStart:
    """A tool call begins. ``index`` names it in the ToolCallArgs/End that follow."""

    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class ToolCallArgs:
    """A fragment of the call's JSON input; fragments split anywhere."""

    index: int
    fragment: str


@dataclass(frozen=True)
class ToolCallEnd:
    index: int


@dataclass(frozen=True)
class Usage:
    """Token counts; ``None`` where the provider said nothing. In a stream the later
    values replace the earlier ones field by field. ``input_tokens`` counts the
    input not read from the cache (Anthropic's ``input_tokens``; OpenAI's
    ``prompt_tokens`` less ``cached_tokens``)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def merged(self, newer: Usage) -> Usage:
        """These counts updated by ``newer``'s (its ``None`` fields keep ours)."""
        values = {}
        for f in fields(self):
            new = getattr(newer, f.name)
            values[f.name] = getattr(self, f.name) if new is None else new
        return Usage(**values)


@dataclass(frozen=True)
class UsageDelta:
    usage: Usage


#: Stop reasons, neutral: the provider's own word is kept in ``Stop.raw``.
STOP_END = "end"  # the model finished its turn
STOP_TOOL_USE = "tool_use"  # it wants its tool calls run
STOP_MAX_TOKENS = "max_tokens"  # cut by max_tokens
STOP_REFUSAL = "refusal"
STOP_OTHER = "other"


@dataclass(frozen=True)
class Stop:
    reason: str  # one of the STOP_* values
    raw: str = ""


Delta = Union[
    TextDelta,
    ThinkingDelta,
    SignatureDelta,
    RedactedThinkingDelta,
    BlockEnd,
    ToolCallStart,
    ToolCallArgs,
    ToolCallEnd,
    UsageDelta,
    Stop,
]
