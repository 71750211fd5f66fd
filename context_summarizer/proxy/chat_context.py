"""What the proxy does to one chat request's context: locate it once, compact it when due (or
when the upstream said it is too long), say what was done, and feed the usage back.

A model whose window is unknown (or whose tokenizer is missing) is forwarded unmanaged, never
silently: a warning header, a metric, and one log line per model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from ..core.effects import Turn
from ..core.errors import (
    BudgetExceeded,
    ConfigurationError,
    HistoryNotInRequest,
    InvalidConversation,
    ReplyReserveTooLarge,
    StoreUnavailable,
    SummarizerError,
    TokenizerUnavailable,
    UnknownModelError,
)
from ..core.located import Located
from ..core.recall_tool import declared_tool_names, recall_tool
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome, Trigger
from ..stores.compaction_asks import CompactionAsk, CompactionAsks
from .answers import count_usage, reports_prompt, usable_usage, usage_figures
from .controls import (
    AUTO,
    NOT_COMPACTED_HEADER,
    Control,
    ascii_reason,
    is_off,
    not_compacted_reason,
    request_control,
)
from .errors import ProxyError, store_unavailable
from .exchange_services import ExchangeServices
from .fast_path import settle
from .headers import credential
from .managed_request import ManagedRequest, summarizer_headers
from .overhead import Overhead
from .upstream import Upstream
from .upstream_count import calibrate_by_count
from .window_advice import budget_advice, reserve_advice

logger = logging.getLogger("context_summarizer.proxy")

_MAX_WARNED_MODELS = 1000  # model names come from clients: bound what is remembered


def unknown_window(model: str, window_configured: bool) -> str:
    """What a proxy user reads about ``model``, whose window (or, with a window configured,
    reply reserve) is neither known nor configured: the proxy's ways to give it (the
    library's are ``ContextManager`` keywords)."""
    if window_configured:
        return (
            f"unknown model {model!r}: its window is set but summarizer's registry does not know "
            "how long its replies may be, so it is forwarded unmanaged; send max_tokens with "
            "each request, or give its [[models]] entry reserve_output_tokens in the --config file"
        )
    return (
        f"unknown model {model!r}: its context window is not known, so it is forwarded "
        "unmanaged; set it with --context-window N (SUMMARIZER_CONTEXT_WINDOW; every model) "
        "or a [[models]] entry with context_window in the --config file"
    )


def _store_down(exc: StoreUnavailable) -> ProxyError:
    logger.warning("answering 503: %s", exc)
    return store_unavailable()


@dataclass(frozen=True, slots=True)
class Locating:
    """A request being located in a worker thread (``ChatContext.begin_locating``)."""

    compactions: int
    """The proxy's compactions when it began (read before the store is)."""
    future: Future[Located]

    async def located(self) -> Located:
        """Where the request stands: at once when the thread is done, else once it is."""
        if self.future.done():
            return self.future.result()
        return await asyncio.wrap_future(self.future)


def request_secrets(upstream: Upstream, headers: Any) -> tuple[str, ...]:
    """The raw keys a request's stored traces must not hold: its own credential and every
    upstream key of the proxy (``redaction``)."""
    presented = credential(headers)
    return (presented, *upstream.routes.keys) if presented else upstream.routes.keys


class ChatContext:
    """One chat request's context: located, settled, and reported back to the client."""

    def __init__(
        self, services: ExchangeServices, chat: ManagedRequest, overhead: Overhead
    ) -> None:
        self.services = services
        self.chat = chat
        self.overhead = overhead
        self.route = services.upstream.route_for(chat.model)
        """Where the request and its summary calls go, and whose configuration compacts it."""
        self.located: Located | None = None
        self.result: PrepareResult | None = None
        """What is sent: None until settled, and for a request forwarded unmanaged."""
        self.warning: str | None = None
        self.reported_tokens: int | None = None
        """The provider's prompt tokens for this request, once its usage arrived."""
        self.cached_tokens: int | None = None
        self.recall_calls = 0
        """Recall tool calls answered for this request (``recall_exchange``)."""
        self.recalled: list[str] = []
        """The spans they read back, each once, in order."""
        self.secrets = request_secrets(services.upstream, chat.headers)
        """The keys nothing stored for this request may hold: its credential, the server's."""
        self.control: Control = AUTO
        """What the client asked of this request's compaction (``proxy.controls``)."""
        self.not_compacted: str | None = None
        """Why it was forwarded unmanaged, when the client or the model's configuration said so."""
        self.ask: CompactionAsk | None = None
        """The session's pending ask for a compaction this request takes up, if any."""

    def turn(self) -> Turn:
        """The request as the engine sees it, with the keys its checkpoints must not hold and
        the recall tool's name when it may be offered (``recall_name``)."""
        turn = self.chat.turn()
        control = self.control
        return replace(
            turn,
            secrets=self.secrets,
            recall=self.recall_name(turn),
            compact_now=control.mode == "now",
            instructions=control.instructions,
        )

    def recall_name(self, turn: Turn) -> str | None:
        """The recall tool's name for this request (the first of ``TOOL_NAMES`` the agent's
        tools leave free), or None: its API has no recall codec, its model's ``recall`` is
        off, or the request's tool choice or candidate count leaves it no room."""
        codec = self.chat.recall
        if codec is None or not self.route.context.config.recall:
            return None
        if getattr(self.chat, "compact_threshold", None) is not None:
            return None  # the client's own compaction (Responses): its turns are dropped
        if not codec.may_offer(self.chat.body):
            return None
        tool = recall_tool(self.route.context.engine.prompts, declared_tool_names(turn.tools))
        return tool.name if tool is not None else None

    @property
    def as_sent(self) -> bool:
        """Whether the request is forwarded exactly as sent: its header turns compaction off
        for it, or its model's configuration does."""
        return is_off(self.chat.headers) or not self.route.context.config.compact

    def splice_held(self) -> None:
        """Put back into the request the recall exchanges held for its conversation (the
        model called recall beside the agent's tools in an earlier answer), before the engine
        reads it: ``recall_held``. Not into one forwarded as sent (compaction off for it, or
        for its model): the client's own conversation, which never showed those calls, goes."""
        if self.as_sent:
            return
        codec = self.chat.recall
        find = self.services.held.finder(self.chat.namespace) if codec is not None else None
        if codec is None or find is None:
            return
        spliced = codec.spliced(self.chat.body, find)
        if spliced is None:
            return
        try:
            self.chat.replace_body(spliced)
        except InvalidConversation:  # never expected: the turn goes as the client sent it
            logger.warning("a held recall exchange could not be put back; sent without it")

    @property
    def due(self) -> bool:
        """Whether the located request still needs a compaction before it is sent."""
        return self.located is not None and self.result is None and self.warning is None

    def begin_locating(self) -> Locating:
        """Start locating the request in one of the lane's threads (``ExchangeServices.locator``),
        for ``locate`` to take up. A lane request sent before it is located is located while
        the upstream works (the lane takes it up as the thread ends, most often long before
        the answer comes)."""
        compactions = self.services.tally.count  # read before the store is
        try:
            turn = self.turn()
        except Exception as exc:
            failed: Future[Located] = Future()
            failed.set_exception(exc)
            return Locating(compactions, failed)
        return Locating(compactions, self.services.locator.submit(self._locate_asked, turn))

    def _locate_asked(self, turn: Turn) -> Located:
        """``turn`` located (in a worker thread: it reads the store), then again as "compact
        now" when its session has a pending ask for a compaction and the request asked for
        nothing itself (``stores.compaction_asks``)."""
        context = self.route.context
        located = context.locate(turn)
        store = context.store
        if self.control.mode != "auto" or not isinstance(store, CompactionAsks):
            return located
        ask = store.compaction_ask(located.namespace, located.session)
        if ask is None:
            return located
        self.ask = ask
        self.control = Control("now", ask.instructions, via="session")
        return context.locate(self.turn())

    async def locate(self, begun: Locating | None = None) -> None:
        """Locate the request (once, in a worker thread, or as ``begun``); settled already
        when no compaction is due. ``ProxyError`` for an invalid conversation (a 400), or when
        the store is down (a 503)."""
        context = self.route.context
        if begun is None:
            self.control = request_control(self.chat.headers)
        if self.as_sent:
            self._off()
            return
        # Read before the store is.
        compactions = self.services.tally.count if begun is None else begun.compactions
        try:
            if begun is None:
                self.located = await asyncio.to_thread(self._locate_asked, self.turn())
            else:
                self.located = await begun.located()
            if await calibrate_by_count(
                self.services.upstream, self.chat, self.located, self.route
            ):
                self.located = await context.alocate(self.turn())
        except InvalidConversation as exc:
            raise ProxyError(400, str(exc), param=exc.param, code="invalid_value") from None
        except (ConfigurationError, TokenizerUnavailable, HistoryNotInRequest) as exc:
            self._unmanaged(exc)
            return
        except StoreUnavailable as exc:
            raise _store_down(exc) from None
        self.result = context.ready(self.located)
        if self.result is not None:
            settle(self.chat, self.located, self.route, compactions)
        if self.result is not None and context.should_draft(self.located):
            summarizer = self._counted(self.chat.summarizer(self.services.upstream, self.route))
            context.aahead(self.located, summarizer=summarizer)

    async def compact(self, force: Trigger | None = None) -> None:
        """Compact (waiting for the session's lock); ``ProxyError`` if it cannot fit (a 400),
        or the store is down (a 503). A client's "compact now" compacts as ``manual``."""
        if self.located is None:
            return
        if force is None and self.control.mode == "now":
            force = "manual"
        self.overhead.pause()
        try:
            self.result = await self.route.context.acompact(
                self.located,
                force=force,
                summarizer=self._counted(self.chat.summarizer(self.services.upstream, self.route)),
            )
            await self._answer_ask()
        except BudgetExceeded as exc:
            message = budget_advice(exc, self.located.budget)
            raise ProxyError(
                400, message, param="messages", code="context_length_exceeded"
            ) from None
        except InvalidConversation as exc:
            raise ProxyError(400, str(exc), param=exc.param, code="invalid_value") from None
        except (ConfigurationError, TokenizerUnavailable) as exc:
            self._unmanaged(exc)
        except StoreUnavailable as exc:
            raise _store_down(exc) from None
        finally:
            self.overhead.resume()

    async def _answer_ask(self) -> None:
        """Clear the session's ask this request took up (once compacted, or found to have
        nothing to compact: asked again, it would not have more)."""
        ask, store = self.ask, self.route.context.store
        if ask is None or self.located is None or not isinstance(store, CompactionAsks):
            return
        located = self.located
        await asyncio.to_thread(
            store.clear_compaction_ask, located.namespace, located.session, ask.asked_at
        )

    def _off(self) -> None:
        """Forward exactly as sent: the client, or the model's configuration, turned
        compaction off."""
        self.services.metrics.unmanaged.labels("compaction_off").inc()
        if is_off(self.chat.headers):
            self.not_compacted = "off for this request (header)"
        else:
            self.not_compacted = ascii_reason(f"compaction is off for model {self.chat.model}")

    def _unmanaged(self, exc: SummarizerError) -> None:
        """Forward without context management (e.g. a model whose window is unknown)."""
        reason = exc.reason if isinstance(exc, HistoryNotInRequest) else type(exc).__name__
        problem = str(exc)
        if isinstance(exc, ReplyReserveTooLarge):
            problem = reserve_advice(exc)
        elif isinstance(exc, UnknownModelError):
            problem = unknown_window(
                exc.model, self.route.context.config.context_window is not None
            )
        self.services.metrics.unmanaged.labels(reason).inc()
        warned = self.services.warned_models
        key = f"{reason}\0{self.chat.model}"  # once per model and reason
        if key not in warned and len(warned) < _MAX_WARNED_MODELS:
            warned.add(key)
            logger.warning("forwarding %r requests unmanaged: %s", self.chat.model, problem)
        # Header values must be printable ASCII; the message may quote client input.
        text = " ".join(problem.split())[:300]
        self.warning = "".join(ch if " " <= ch <= "~" else "?" for ch in text)

    def _counted(self, perform: Callable[[SummarizeCall], Any]) -> Callable[[SummarizeCall], Any]:
        """``perform``, counting each failed attempt in ``summarizer_upstream_errors_total``
        and the summary's usage in the token counters."""
        errors = self.services.upstream.errors
        tokens, api = self.services.metrics.tokens, self.chat.api.name

        async def call(request: SummarizeCall) -> SummaryOutcome:
            outcome: SummaryOutcome = await perform(request)
            for status in outcome.failed_attempts:
                errors.labels(status, "summary").inc()
            usage = (outcome.prompt_tokens, outcome.cached_tokens, outcome.completion_tokens)
            tokens.add(api, "summary", *usage)
            return outcome

        return call

    def outgoing(self) -> bytes:
        """The body to send upstream for the current result."""
        return self.chat.outgoing(self.result)

    def headers(self) -> dict[str, str]:
        """The ``x-summarizer-*`` response headers."""
        out = summarizer_headers(self.result)
        if self.warning:
            out["x-summarizer-warning"] = self.warning
        reason = self.not_compacted or not_compacted_reason(self.result, self.located, self.control)
        if reason is None and self.result is None and self.warning:
            reason = "not managed: see x-summarizer-warning"
        if reason is not None:
            out[NOT_COMPACTED_HEADER] = reason
        return out

    async def observe(self, usage: Any) -> None:
        """Calibrate with the provider's reported usage (ignored, and said once per kind of
        value, when ``prompt_tokens`` is not a positive integer): this session's calibration at
        once, the store's shared one by the activity writer, off the answer's path."""
        if not self.observe_queued(usage):
            assert self.result is not None
            await self.route.context.aobserve(self.result, usage, model=self.chat.model, log=False)

    @property
    def observing_waits(self) -> bool:
        """Whether observing a usage waits for the store (it keeps no activity log to queue
        the write on): ``observe`` then writes it, and ``observe_queued`` cannot."""
        return self.services.activity is None

    def observe_queued(self, usage: Any) -> bool:
        """``observe`` where it waits for nothing: this session's calibration now, the store's
        queued for the activity writer. False when the usage is to be observed and observing
        waits (``observing_waits``): ``observe`` then writes it itself."""
        count_usage(self.services.metrics.tokens, self.chat.api.name, usage)
        if self.result is None or not reports_prompt(usage):
            return True
        self.reported_tokens, self.cached_tokens = usage_figures(usage)
        if not usable_usage(self.services.upstream, usage):
            return True
        activity = self.services.activity
        if activity is None:
            return False
        write = self.route.context.observe_later(self.result, usage, model=self.chat.model)
        activity.defer(write)  # past the answer, on the writer's thread
        return True
