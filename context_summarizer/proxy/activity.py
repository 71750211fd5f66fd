"""What the proxy notes of each managed request it answers: what compaction saved it
(``count_saved``, in ``summarizer_tokens_saved_total``) and, once the answer is sent, a
``RequestRecord`` in the store's activity log and, with ``--record``, the session's conversation
and the summary records of the compaction it made, if any (secrets redacted). The record is
queued and written in batches by the proxy's ``ActivityWriter``: never on the client's critical
path, and a failed write costs a log line, never the request."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from starlette.background import BackgroundTask
from starlette.responses import Response

from ..core.activity import Recording, RequestRecord, redact
from ..core.summary_records import SummaryRecord
from .chat_context import ChatContext
from .exchange_services import ExchangeServices

logger = logging.getLogger("context_summarizer.proxy")


def request_record(
    context: ChatContext, *, status: int, started: float, saved: int | None = None
) -> RequestRecord | None:
    """The record of a settled request (None for one forwarded unmanaged); ``saved``: its
    ``tokens_saved`` (``count_saved``)."""
    located, result = context.located, context.result
    if located is None or result is None:
        return None
    event = result.event
    return RequestRecord(
        namespace=result.namespace,
        session=result.session,
        at=started,
        model=redact(located.model, context.secrets),
        api=context.chat.api.name,
        tokens_before=event.tokens_before if event is not None else located.calibrated_tokens,
        tokens_sent=result.report.estimated_tokens,
        tokens_saved=saved,
        window=located.budget.context_window,
        reported_tokens=context.reported_tokens,
        cached_tokens=context.cached_tokens,
        compacted=result.compacted,
        checkpoint_id=result.checkpoint_id,
        status=status,
        latency_s=time.time() - started,
        compaction_s=event.latency_s if event is not None and result.compacted else None,
        ahead=bool(event is not None and result.compacted and event.ahead_of_time),
        recall_calls=context.recall_calls,
        recalled=list(context.recalled),
    )


def count_saved(services: ExchangeServices, context: ChatContext, status: int) -> int | None:
    """What compaction kept a request from sending (``tokens_saved``; 0 unless its answer is a
    success), counted in ``summarizer_tokens_saved_total``; None for a request forwarded
    unmanaged."""
    located, result = context.located, context.result
    if located is None or result is None:
        return None
    tokens = services.metrics.tokens
    saved = tokens.savings.of(located, result) if 200 <= status < 300 else 0
    tokens.saved(context.chat.api.name, saved)
    return saved


def note_after(
    response: Response, services: ExchangeServices, context: ChatContext, started: float
) -> Response:
    """``response``, its tokens saved counted (``count_saved``), set to log its request once it
    has been sent (its stream included). A stream answered while its compaction runs is
    counted once it has been sent: only then is its result known."""
    status = response.status_code
    pending = context.due
    saved = None if pending else count_saved(services, context, status)
    if services.activity is None and not pending:
        return response

    async def note() -> None:
        counted = count_saved(services, context, status) if pending else saved
        _queue(services, context, status=status, started=started, saved=counted)

    response.background = _chained(response.background, note)
    return response


def note_request(
    services: ExchangeServices, context: ChatContext, *, status: int, started: float
) -> None:
    """Count the tokens saved of a request whose answer is sent (``count_saved``), and queue
    its record (and its recording, with ``--record``)."""
    saved = count_saved(services, context, status)
    _queue(services, context, status=status, started=started, saved=saved)


def _queue(
    services: ExchangeServices,
    context: ChatContext,
    *,
    status: int,
    started: float,
    saved: int | None,
) -> None:
    """Queue the record of a request whose answer is sent (and, with ``--record``, its
    recording and its compaction's summary records)."""
    writer = services.activity
    if writer is None:
        return
    record = request_record(context, status=status, started=started, saved=saved)
    if record is None:
        return
    recording = _recording(context) if services.record else None
    drafted = context.result.summary_records if context.result is not None else []
    summaries = _summaries(drafted, context.secrets) if services.record and drafted else None
    writer.submit(record, recording, summaries)


def note_summaries(services: ExchangeServices, context: ChatContext) -> None:
    """With ``--record``, queue the summary records of a compaction no request record goes with
    (``POST /v1/responses/compact`` answers no model request), redacted like ``_queue``'s."""
    writer = services.activity
    result = context.result
    if writer is None or not services.record or result is None or not result.summary_records:
        return
    build = _summaries(result.summary_records, context.secrets)
    writer.defer(lambda: writer.log.record_summaries(build()))


def _recording(context: ChatContext) -> Callable[[], Recording]:
    """Builds the session's recording (redaction runs in the worker thread)."""
    turn = context.chat.turn()
    secrets = context.secrets
    result = context.result
    assert result is not None

    def build() -> Recording:
        return Recording(
            namespace=result.namespace,
            session=result.session,
            model=redact(turn.model, secrets),
            at=time.time(),
            messages=redact(list(turn.messages), secrets),
            tools=redact(list(turn.tools), secrets) if turn.tools else None,
        )

    return build


def _summaries(
    records: Sequence[SummaryRecord], secrets: Sequence[str]
) -> Callable[[], list[SummaryRecord]]:
    """Builds the compaction's summary records, redacted like the recording (in the worker
    thread: the requests they hold carry the whole live prefix). What keys them (namespace,
    session, checkpoint) is kept as it is, as the recording's: a session a client named
    ``task-...`` has a credential's shape."""
    kept = list(records)

    def build() -> list[SummaryRecord]:
        return [
            SummaryRecord.model_validate(
                {
                    **redact(record.model_dump(mode="json"), secrets),
                    "namespace": record.namespace,
                    "session": record.session,
                    "checkpoint_id": record.checkpoint_id,
                }
            )
            for record in kept
        ]

    return build


def _chained(first: BackgroundTask | None, then: Callable[[], Awaitable[None]]) -> BackgroundTask:
    async def both() -> None:
        if first is not None:
            await first()
        await then()

    return BackgroundTask(both)
