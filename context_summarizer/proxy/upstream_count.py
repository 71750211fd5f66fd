"""Asking the upstream to count, when counting ourselves is not good enough to decide.

There is no public Claude tokenizer: a Messages request is estimated with ``o200k_base`` and
calibrated from each answer's ``usage``. When the calibrated estimate is within
``NEAR_TRIGGER`` of the compaction trigger, the decision hangs on that estimate's error; then
the proxy asks the upstream's ``POST /v1/messages/count_tokens`` for the request as it would be
sent, calibrates with the answer, and decides on the corrected figure. An upstream without the
route (404, 405, 501) is not asked again.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import httpx2

from ..core.located import Located
from .body import json_object

if TYPE_CHECKING:
    from .managed_request import ManagedRequest
    from .model_routes import ModelRoute
    from .upstream import Upstream

logger = logging.getLogger("context_summarizer.proxy")

NEAR_TRIGGER = 0.1
"""How close to the trigger (a share of it, either side) an estimate must be to be checked."""
_NO_ROUTE = frozenset({404, 405, 501})


def near_trigger(located: Located) -> bool:
    """Whether ``located``'s calibrated estimate is within ``NEAR_TRIGGER`` of its trigger."""
    trigger = located.budget.trigger_tokens
    return abs(located.calibrated_tokens - trigger) <= NEAR_TRIGGER * trigger


async def calibrate_by_count(
    upstream: Upstream, chat: ManagedRequest, located: Located, route: ModelRoute
) -> bool:
    """Count ``located``'s request at ``route``'s upstream when that can change the decision,
    and calibrate ``route``'s context manager with the answer. Whether calibration changed (then
    locate again)."""
    body_for = getattr(chat, "count_tokens_body", None)
    if body_for is None or route.upstream in upstream.count_tokens_missing:
        return False
    if not near_trigger(located):
        return False
    context = route.context
    sent_as = context.engine.unchanged(located)
    try:
        response = await upstream.http.post(
            route.url("/messages/count_tokens"),
            content=json.dumps(body_for(sent_as)).encode(),
            headers=[
                *upstream.forward_headers(
                    chat.headers,
                    drop=("content-length", "accept-encoding"),
                    key_header=chat.api.key_header,
                    route=route,
                ),
                ("content-type", "application/json"),
            ],
        )
    except httpx2.TransportError:
        return False  # the request itself will meet the same upstream; nothing is lost
    if response.status_code in _NO_ROUTE:
        upstream.count_tokens_missing.add(route.upstream)
        logger.info(
            "the upstream %s has no /messages/count_tokens; estimates stay calibrated by usage",
            route.host,
        )
        return False
    read = json_object(response.content, exact=True)
    counted: Any = read.get("input_tokens") if read is not None else None
    if response.status_code != 200 or type(counted) is not int or counted <= 0:
        return False
    upstream.counted()
    await context.aobserve(sent_as, {"prompt_tokens": counted}, model=chat.model, log=False)
    return True
