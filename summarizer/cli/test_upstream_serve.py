"""``summarizer serve --test-upstream`` and ``summarizer demo --keep-serving``: the proxy in
front of the built-in test model on 127.0.0.1, so a real agent can be pointed at it with no key
and no network. The test model answers each agent request with one line saying what it
received, and writes summaries with a heuristic."""

from __future__ import annotations

from typing import Any

from ..core.messages import message_text


def describe_request(body: dict[str, Any]) -> Any:
    """The test model's answer to an agent: what it received (it has no other knowledge)."""
    from ..testing import Reply

    messages = body.get("messages")
    if not isinstance(messages, list):  # a Responses or Messages body reaches it translated
        messages = []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    said = " ".join(message_text(last).split())[:80] if last else ""
    summaries = sum(
        1 for m in messages if isinstance(m, dict) and "summarizer" in message_text(m)[:200]
    )
    return Reply(
        content=(
            f"(summarizer test model) received {len(messages)} messages"
            + (f", {summaries} of them summaries" if summaries else "")
            + (f"; the last one says: {said}" if said else "")
        )
    )


def serve_with_test_upstream(settings: Any, *, ui_fragment: str = "") -> None:
    """Serve the proxy for ``settings`` with the test model started as its upstream
    (``ui_fragment``: see ``banner_lines``)."""
    from ..proxy.server import serve
    from ..testing import RoutingResponder, TestUpstream

    with TestUpstream(responder=RoutingResponder(describe_request)) as upstream:
        settings = settings.model_copy(update={"upstream": upstream.base_url})
        serve(
            settings,
            upstream_note=" (the built-in test model: no key, no network)",
            ui_fragment=ui_fragment,
        )
