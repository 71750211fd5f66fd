"""``summarizer serve --test-upstream`` and ``summarizer demo --keep-serving``: the proxy in
front of the built-in test model on 127.0.0.1, so a real agent can be pointed at it with no key
and no network. The test model answers each agent request with one line saying what it
received (or, with ``--test-script``, with the script's next tool calls: see
:mod:`context_summarizer.testing.tool_script`), and writes summaries with a heuristic."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from ..core.messages import message_text

if TYPE_CHECKING:
    from ..testing.tool_script import ScriptStep

TEST_MODEL_SIGNATURE = "(summarizer test model)"
"""How every answer ``describe_request`` gives opens."""


@cache
def _summary_openings() -> tuple[str, ...]:
    """How the proxy's summary messages open, in every prompt version: their frames' text up to
    the first ``]`` (``[Context summary]``), the model's summaries' and the mechanical ones'."""
    from ..loaders.prompts import load_prompt

    frames = (
        load_prompt(name, version)
        for name in ("summary_frame", "mechanical_frame")
        for version in ("v1", "v2")
    )
    return tuple({frame[: frame.index("]") + 1] for frame in frames})


def is_proxy_summary(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a summary the proxy wrote into the conversation (never something
    the model said: an assistant or tool message is not one)."""
    if message.get("role") in ("assistant", "tool"):
        return False
    return message_text(message).lstrip().startswith(_summary_openings())


def describe_request(body: dict[str, Any]) -> Any:
    """The test model's answer to an agent: what it received (it has no other knowledge)."""
    from ..testing import Reply

    messages = body.get("messages")
    if not isinstance(messages, list):  # a Responses or Messages body reaches it translated
        messages = []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    said = " ".join(message_text(last).split())[:80] if last else ""
    summaries = sum(1 for m in messages if isinstance(m, dict) and is_proxy_summary(m))
    return Reply(
        content=(
            f"{TEST_MODEL_SIGNATURE} received {len(messages)} messages"
            + (f", {summaries} of them summaries" if summaries else "")
            + (f"; the last one says: {said}" if said else "")
        )
    )


def for_test_model(settings: Any) -> Any:
    """``settings`` for an upstream that is the test model under every model name: with a
    window configured, every model (one the registry does not know too, which would otherwise
    be forwarded unmanaged) has the test model's limits: that window, with a quarter of it
    kept for the reply unless a request asks for its own cap. So the banner's "N tokens for
    every model" holds."""
    from ..core.model_limits import ModelLimits

    config = settings.compaction
    window = config.context_window
    if window is None:
        return settings
    fallback = ModelLimits(context_window=window, max_output_tokens=max(1, window // 4))
    # The empty prefix matches every name; a longer configured one still wins.
    limits = {"": fallback, **config.model_limits}
    return settings.model_copy(
        update={"compaction": config.model_copy(update={"model_limits": limits})}
    )


def serve_with_test_upstream(
    settings: Any, *, ui_fragment: str = "", script: Sequence[ScriptStep] | None = None
) -> None:
    """Serve the proxy for ``settings`` with the test model started as its upstream
    (``ui_fragment``: see ``banner_lines``; ``script``: the steps of ``--test-script``, walked
    by agent requests that offer tools)."""
    from ..proxy.server import serve
    from ..testing import RoutingResponder, TestUpstream, ToolScript

    agent = describe_request if script is None else ToolScript(script, describe_request)
    with TestUpstream(responder=RoutingResponder(agent)) as upstream:
        # An agent resuming a session across restarts sends old tool call ids back.
        upstream.call_id_tag = secrets.token_hex(4) + "_"
        settings = for_test_model(settings).model_copy(update={"upstream": upstream.base_url})
        note = " (the built-in test model: no key, no network)"
        if script is not None:
            note = f" (the built-in test model, following a script of {len(script)} steps)"
        serve(settings, upstream_note=note, ui_fragment=ui_fragment)
