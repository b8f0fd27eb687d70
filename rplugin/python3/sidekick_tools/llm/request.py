"""From chat lines to the bytes of a provider request.

``build_request(lines, config, tools)`` reads the chat (front matter, system,
turns), picks the provider and options, masks secrets, and has the provider's
module serialise it. Pure: no I/O, no key (the key is added when the request is
sent, by :mod:`.stream`), so the same lines and config give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..chat.blocks import (
    ASSISTANT,
    Conversation,
    Text,
    ToolResultBlock,
    ToolSpec,
    ToolUse,
    Turn,
)
from ..chat.conversation import ChatDocument, read_chat
from ..chat.parser import Chat
from ..chat.reply_render import mask_reply_text
from ..secrets_mask import mask, mask_value
from .errors import ChatNotReady
from .providers import HttpRequest, ProviderKind, RequestParts, get_kind
from .settings import ChatConfig, ProviderConfig, RequestOptions, request_options


@dataclass
class ChatRequest:
    model_spec: str  # "provider/model" as the chat or config named it
    provider: ProviderConfig
    options: RequestOptions
    http: HttpRequest
    conversation: Conversation = field(repr=False)  # what was sent (masked)
    document: ChatDocument = field(repr=False)  # the chat as read
    kind: ProviderKind = field(repr=False)


def _mask_block(block: Any, role: str) -> Any:
    if isinstance(block, Text):
        # the model's own text as the chat shows it (its code left readable)
        return Text(mask_reply_text(block.text) if role == ASSISTANT else mask(block.text))
    if isinstance(block, ToolUse):
        return replace(block, input=mask_value(block.input))
    if isinstance(block, ToolResultBlock):
        return replace(block, content=mask(block.content))
    return block  # thinking: its signature covers it, and it came from the model


def _masked_turn(turn: Turn) -> Turn:
    """``turn`` masked, made once: a chat's turns are the same objects from one
    read to the next, so only a turn new since the last send is masked (and the
    masked turn keeps each provider's encoding of it)."""
    masked = turn.memo.get("masked")
    if masked is None:
        blocks = [_mask_block(b, turn.role) for b in turn.blocks]
        masked = turn.memo["masked"] = Turn(turn.role, blocks)
    return masked


def mask_conversation(conversation: Conversation) -> Conversation:
    """``conversation`` with secrets masked in everything but thinking."""
    return Conversation(
        mask(conversation.system) if conversation.system else conversation.system,
        [_masked_turn(turn) for turn in conversation.turns],
    )


def tool_specs(tools: Iterable[Any]) -> list[ToolSpec]:
    """Tools (``tools.REGISTRY.values()`` or ToolSpecs) as the model sees them."""
    return [t if isinstance(t, ToolSpec) else ToolSpec.of(t) for t in tools]


def encode_request(
    conversation: Conversation,
    options: RequestOptions,
    tools: Iterable[Any],
    provider: ProviderConfig,
) -> HttpRequest:
    """The request for a conversation already in neutral form (masked here)."""
    kind = get_kind(provider.kind)
    masked = mask_conversation(conversation)
    return kind.build(RequestParts(masked, options, tool_specs(tools), provider))


def check_sendable(document: ChatDocument) -> None:
    """Raise ChatNotReady unless the chat ends in a user turn and every call has a result."""
    if document.unanswered:
        count = len(document.unanswered)
        rows = ", ".join(str(c.start_row + 1) for c in document.unanswered[:5])
        raise ChatNotReady(
            f"{count} tool call{'s' if count > 1 else ''} without a result (line {rows}): "
            f"run or deny {'them' if count > 1 else 'it'} first",
            document.unanswered,
        )
    turns = document.conversation.turns
    if not turns or turns[-1].role != "user":
        raise ChatNotReady("Nothing to send: write your message after a USER: line")


def build_request(
    lines: list[str],
    config: ChatConfig | dict[str, Any] | None,
    tools: Iterable[Any],
    *,
    chat: Chat | None = None,
) -> ChatRequest:
    """The request the chat in ``lines`` makes (``chat``: its parse, if at hand).

    ``config`` is the ``chat`` table of the setup (or a ChatConfig); ``tools`` the
    tool registry's values. Raises ChatNotReady (calls without results, nothing to
    send) and ConfigError (unknown provider or kind, bad front matter value).
    """
    settings = config if isinstance(config, ChatConfig) else ChatConfig.from_dict(config)
    document = read_chat(lines, chat)
    check_sendable(document)
    model_spec, options = request_options(
        settings, document.front.values if document.front else None
    )
    provider, model = settings.provider_for(model_spec)
    options = replace(options, model=model)
    kind = get_kind(provider.kind)
    conversation = document.conversation
    if conversation.system is None and settings.system:
        conversation = Conversation(settings.system, conversation.turns)
    conversation = mask_conversation(conversation)
    http = kind.build(RequestParts(conversation, options, tool_specs(tools), provider))
    return ChatRequest(model_spec, provider, options, http, conversation, document, kind)
