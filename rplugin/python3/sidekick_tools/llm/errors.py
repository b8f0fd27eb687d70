"""Errors of the chat loop. ``str(error)`` is a sentence for the user: it says what
went wrong and, where the user can act, what to do. None ever holds an API key:
every message that may echo a server's words is masked before it is raised."""

from __future__ import annotations


class LLMError(Exception):
    """Base class; ``message`` is what the user is told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(LLMError):
    """The chat names a provider or an option the configuration does not allow."""


class ChatNotReady(LLMError):
    """The chat cannot be sent as it stands (calls without results, nothing to send)."""

    def __init__(self, message: str, calls: list | None = None) -> None:
        super().__init__(message)
        self.calls = calls or []


class KeyUnavailable(LLMError):
    """The API key could not be resolved (variable unset, command failed)."""


class MissingDependency(LLMError):
    """httpx2 is not installed in the host's Python."""


class ProviderError(LLMError):
    """The provider refused the request or failed while answering.

    ``status`` is the HTTP status (0 for an ``error`` event inside a stream),
    ``error_type`` the provider's own word (``overloaded_error``, ``rate_limit_error``,
    ``invalid_request_error``…), ``retry_after`` the wait it asked for, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        error_type: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Worth another try after a pause: rate limits and overload (HTTP 429, 503,
        529, or an ``overloaded_error``/``rate_limit_error`` inside a stream)."""
        return self.status in (429, 503, 529) or self.error_type in (
            "overloaded_error",
            "rate_limit_error",
        )


class StreamError(LLMError):
    """The reply stream broke: ``kind`` is ``dropped`` (the connection closed early),
    ``timeout`` (connect or idle read), ``malformed`` (an event that does not parse)
    or ``connect`` (the server could not be reached)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
