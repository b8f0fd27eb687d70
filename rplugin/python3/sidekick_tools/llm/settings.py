"""The chat configuration (``setup({ chat = {...} })``, DESIGN §10) as typed values,
and the per-chat overrides of its front matter.

Lua declares and validates the options; this module only reads the table it
sends, completed from the declared defaults (`defaults.resolve`), so tests and
the bench can pass a plain dict. A chat
file may come from someone else, so its front matter can choose among the
configured providers and tune the request (model, max_tokens, temperature,
thinking) but never change where a request goes or which key it carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..defaults import default, resolve
from .errors import ConfigError

DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
DEFAULT_API_KEYS = {"anthropic": "env:ANTHROPIC_API_KEY", "openai": "env:OPENAI_API_KEY"}

#: Front matter keys that change the request; any other key is left to the caller.
REQUEST_KEYS = ("model", "max_tokens", "temperature", "thinking")

_INT = re.compile(r"[0-9]+")


@dataclass
class ProviderConfig:
    name: str  # the key in chat.providers, the part of "provider/model" before "/"
    kind: str  # a module in llm/providers/
    base_url: str
    api_key: str | None = field(default=None, repr=False)  # "env:NAME", "cmd:...", a literal
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    #: OpenAI kind: the body field for the token limit; None: max_completion_tokens
    #: on api.openai.com (its reasoning models refuse max_tokens), max_tokens elsewhere
    max_tokens_param: str | None = None


def _default_seconds(path: str) -> Any:
    return field(default_factory=lambda: float(default(path)))


@dataclass
class Timeouts:
    connect: float = _default_seconds("chat.timeouts.connect")
    read: float = _default_seconds("chat.timeouts.read")  # longest silence inside a stream


@dataclass
class ChatConfig:
    model: str
    providers: dict[str, ProviderConfig]
    system: str | None
    max_tokens: int
    temperature: float | None
    thinking: int | str | None  # budget tokens, "adaptive", or None (off)
    max_attempts: int  # tries per request when rate limited or overloaded
    timeouts: Timeouts

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> ChatConfig:
        """The ``chat`` table of the setup, whole or in part (what it lacks takes
        the declared default; ``providers`` given replaces the default ones)."""
        raw = resolve({"chat": dict(raw or {})})["chat"]
        providers: dict[str, ProviderConfig] = {}
        for name, spec in dict(raw["providers"] or {}).items():
            spec = dict(spec or {})
            kind = str(spec.get("kind") or name)
            default_url = DEFAULT_BASE_URLS.get(kind, "")
            base_url = str(spec.get("base_url") or default_url).rstrip("/")
            # The default key only ever goes to the provider's own server: a local
            # server configured with kind "openai" must not receive OPENAI_API_KEY.
            api_key = spec.get("api_key")
            if api_key is None and base_url == default_url:
                api_key = DEFAULT_API_KEYS.get(kind)
            providers[str(name)] = ProviderConfig(
                name=str(name),
                kind=kind,
                base_url=base_url,
                api_key=api_key,
                headers={str(k): str(v) for k, v in dict(spec.get("headers") or {}).items()},
                max_tokens_param=spec.get("max_tokens_param"),
            )
        timeouts = raw["timeouts"]
        return cls(
            model=str(raw["model"] or default("chat.model")),
            providers=providers,
            system=raw["system"] or None,
            max_tokens=int(raw["max_tokens"] or default("chat.max_tokens")),
            temperature=_float_or_none(raw["temperature"]),
            thinking=parse_thinking(raw["thinking"]),
            max_attempts=max(1, int(raw["max_attempts"] or default("chat.max_attempts"))),
            timeouts=Timeouts(
                connect=float(timeouts["connect"] or default("chat.timeouts.connect")),
                read=float(timeouts["read"] or default("chat.timeouts.read")),
            ),
        )

    def provider_for(self, model_spec: str) -> tuple[ProviderConfig, str]:
        """The provider and model named by ``"provider/model"`` (the model may hold "/")."""
        name, slash, model = model_spec.partition("/")
        if not slash or not name or not model:
            raise ConfigError(
                f'Model "{model_spec}" is not "provider/model": write it as, for example, '
                f'"anthropic/claude-sonnet-4-5" (front matter "model:" or chat.model)'
            )
        provider = self.providers.get(name)
        if provider is None:
            known = ", ".join(sorted(self.providers)) or "none"
            raise ConfigError(
                f'No provider "{name}" in chat.providers (configured: {known}); '
                f"add it to setup({{ chat = {{ providers = ... }} }}) or pick another model"
            )
        return provider, model


@dataclass
class RequestOptions:
    """What one request asks of the model, after the chat's overrides."""

    model: str  # as the provider names it (without "provider/")
    max_tokens: int
    temperature: float | None = None
    thinking: int | str | None = None


def _float_or_none(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"temperature must be a number, not {value!r}") from None


def _whole(name: str, digits: str) -> int:
    """A front matter's number of tokens; one past any model's reach is said as
    such (Python refuses to read a number of over 4,300 digits at all)."""
    if len(digits.lstrip("0")) > 12:
        raise ConfigError(f"{name} is too large: {digits[:16]}… ({len(digits)} digits)")
    return int(digits)


def parse_thinking(value: Any) -> int | str | None:
    """``thinking`` as written in the config or a front matter: a token budget,
    ``adaptive``, or off (``off``, ``false``, ``0``, nothing)."""
    if value is None or value is False:
        return None
    if isinstance(value, bool):
        return "adaptive"
    if isinstance(value, (int, float)):
        return int(value) or None
    text = str(value).strip().lower()
    if text in ("", "off", "false", "no", "0", "none"):
        return None
    if text in ("adaptive", "on", "true", "yes"):
        return "adaptive"
    if _INT.fullmatch(text):
        return _whole("thinking", text)
    raise ConfigError(
        f'thinking must be a token budget (e.g. 4096), "adaptive" or "off", not "{value}"'
    )


def request_options(config: ChatConfig, front: dict[str, str] | None) -> tuple[str, RequestOptions]:
    """The model spec and request options for a chat whose front matter is ``front``."""
    front = front or {}
    model_spec = front.get("model") or config.model
    max_tokens = config.max_tokens
    if front.get("max_tokens"):
        if not _INT.fullmatch(front["max_tokens"].strip()):
            raise ConfigError(f'max_tokens must be a whole number, not "{front["max_tokens"]}"')
        max_tokens = _whole("max_tokens", front["max_tokens"].strip())
    temperature = config.temperature
    if "temperature" in front:
        temperature = _float_or_none(front["temperature"])
    thinking = parse_thinking(front["thinking"]) if "thinking" in front else config.thinking
    return model_spec, RequestOptions(
        model="", max_tokens=max_tokens, temperature=temperature, thinking=thinking
    )
