"""The lane's early send (``proxy.lane``): whether a body that extends a remembered one
provably needs no compaction, without locating it, so that its last byte may go upstream at
once and the engine locate it while the upstream works.

A token covers at least one byte of text, and the JSON of a text at least its bytes: the bytes
a body adds bound the tokens it adds (with a margin for the counter's own rendering of roles,
names and separators). A bound that the count later contradicts is counted and logged
(``sent_over_bound``): the next request compacts.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import InvalidConversation
from ...core.messages import validate_messages
from ..compaction_tally import CompactionTally
from ..model_routes import ModelRoute
from ..remembered import Remembered

MESSAGE_SLACK = 16
"""Tokens allowed per new message beyond its bytes (role and separators, as counted)."""


def fits_unlocated(
    tally: CompactionTally,
    route: ModelRoute | None,
    previous: Remembered,
    messages: list[Any],
    length: int,
    namespace: str,
) -> bool:
    """Whether a body of ``length`` bytes extending ``previous`` (the same bytes before its last
    message and after its messages: the same model, stream options and bytes upstream) to
    ``messages`` provably needs no compaction: ``previous``'s request was located with none
    due, on ``route``, standing on no checkpoint, with no compaction made since; and the new
    messages are text, valid, and their bytes bound their tokens within the trigger."""
    settled = previous.settled
    if settled is None or route is None or settled.route != route:
        return False
    # A checkpoint made since (by a compaction here; elsewhere, with a store a fleet shares)
    # could apply to it: the engine must see it first.
    if not tally.none_since(settled.compactions):
        return False
    if settled.checkpoint_id is not None:  # its requests go rewritten, not as written
        return False
    start = len(previous.body["messages"])
    if not all(map(_text_only, messages[start:])):
        return False
    try:
        validate_messages(messages, start=start)
    except InvalidConversation:
        return False
    added = length - len(previous.raw)
    bound = settled.raw_tokens + added + added // 4 + MESSAGE_SLACK * (len(messages) - start)
    calibration = route.context.engine.calibration
    return calibration.apply(previous.body["model"], bound, namespace) <= settled.trigger_tokens


def _text_only(message: Any) -> bool:
    """Whether a message's content is text alone (an image's tokens are not bounded by its
    bytes)."""
    content = message.get("content") if isinstance(message, dict) else None
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" for part in content
    )
