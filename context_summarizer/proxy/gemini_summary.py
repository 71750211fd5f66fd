"""A Gemini conversation's summary call, as a ``generateContent`` request, and its answer read.

The engine's summary call (its view of the conversation plus one user instruction) becomes the
client's own request: same model (in the URL), ``systemInstruction``, ``tools`` and safety
settings, the conversation's kept contents as the client's own objects, plus one ``user``
content of one text part and, when there are tools, ``toolConfig`` allowing no call (``mode:
NONE``). The prefix Gemini cached implicitly for the previous request serves this one too.

Its ``generationConfig`` is the client's without what would bind or stretch the summary
(structured output, several candidates, stop sequences, thought text). Gemini counts thinking
within ``maxOutputTokens``, so when the client configures thinking (``thinkingConfig``) the summary
gets a fixed thinking budget, the client's own ``thinkingBudget`` or ``THINKING_BUDGET`` (instead
of a ``thinkingLevel``, which cannot go with a budget), and ``maxOutputTokens`` is the summary cap
plus that budget; without ``thinkingConfig`` it is the summary cap, as the client leaves thinking
to the model's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.results import SummaryOutcome
from .body import json_object
from .messages_summary import summary_cap, tokens

THINKING_BUDGET = 1024
"""The thinking budget of a summary request when the client thinks without a fixed budget
(``thinkingLevel``, or the dynamic ``thinkingBudget: -1``)."""

_NOT_COPIED = frozenset(
    {"contents", "toolConfig", "tool_config", "generationConfig", "generation_config"}
)
"""Client fields a summary request does not reuse as they are."""
_NOT_GENERATED = frozenset(
    {
        "responseMimeType",
        "response_mime_type",
        "responseSchema",
        "response_schema",
        "responseJsonSchema",
        "response_json_schema",
        "candidateCount",
        "candidate_count",
        "stopSequences",
        "stop_sequences",
        "maxOutputTokens",
        "max_output_tokens",
        "responseModalities",
        "response_modalities",
    }
)
"""``generationConfig`` fields the summary does without: the agent's output format and cap."""
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


def gemini_summary_body(
    client: Mapping[str, Any], contents: list[Any], chat_body: Mapping[str, Any]
) -> dict[str, Any]:
    """The generateContent request for a summary call: ``client``'s request with ``contents``
    (the conversation the engine summarizes, in wire form) and the instruction (the last message
    of ``chat_body``) appended as one user text part."""
    instruction = str(chat_body["messages"][-1]["content"])
    body = {key: value for key, value in client.items() if key not in _NOT_COPIED}
    body["contents"] = [*contents, {"role": "user", "parts": [{"text": instruction}]}]
    found = client.get("generationConfig", client.get("generation_config"))
    config = (
        {k: v for k, v in found.items() if k not in _NOT_GENERATED}
        if isinstance(found, Mapping)
        else {}
    )
    thinking = config.pop("thinkingConfig", config.pop("thinking_config", None))
    cap = summary_cap(chat_body)
    if isinstance(thinking, Mapping):
        budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
        if type(budget) is not int or budget < 0:
            budget = THINKING_BUDGET
        config["thinkingConfig"] = {"thinkingBudget": budget}
        cap += budget
    config["maxOutputTokens"] = cap
    body["generationConfig"] = config
    if client.get("tools"):
        body["toolConfig"] = {"functionCallingConfig": {"mode": "NONE"}}
    return body


def gemini_summary_outcome(content: bytes, latency: float) -> SummaryOutcome:
    """The summary in a ``GenerateContentResponse``: the text of its first candidate's parts
    (thoughts left out); ``promptTokenCount`` (cached tokens included) as ``prompt_tokens``."""
    answer = json_object(content, exact=True)
    if answer is None:
        return SummaryOutcome(
            error="upstream answered with something that is not a GenerateContentResponse",
            latency_s=latency,
        )
    found = answer.get("usageMetadata")
    usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    figures = SummaryOutcome(
        prompt_tokens=tokens(usage.get("promptTokenCount")),
        cached_tokens=tokens(usage.get("cachedContentTokenCount")),
        completion_tokens=tokens(usage.get("candidatesTokenCount")),
        latency_s=latency,
    )
    candidates = answer.get("candidates")
    candidate = candidates[0] if isinstance(candidates, list) and candidates else None
    if not isinstance(candidate, Mapping):
        feedback = answer.get("promptFeedback")
        reason = feedback.get("blockReason") if isinstance(feedback, Mapping) else None
        why = f" (the prompt was blocked: {reason})" if reason else ""
        return figures.model_copy(update={"error": f"upstream answered with no candidate{why}"})
    body = candidate.get("content")
    parts = body.get("parts") if isinstance(body, Mapping) else None
    parts = [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []
    texts = [p.get("text") for p in parts if not p.get("thought")]
    stop = candidate.get("finishReason")
    return figures.model_copy(
        update={
            "text": "".join(t for t in texts if isinstance(t, str)) if parts else None,
            "finish_reason": _FINISH.get(stop, stop.lower()) if isinstance(stop, str) else None,
            "tool_called": any("functionCall" in p or "function_call" in p for p in parts),
        }
    )
