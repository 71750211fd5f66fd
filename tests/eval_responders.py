"""Deterministic stand-ins for the model in the evaluator's requests, for the test upstream.

- :func:`probe_answer_responder` answers a ``probe_answer`` request with the line of the context
  that shares the most words with the question (or "I don't know"), as a model that can only
  quote what it was shown; offered the recall tool and finding no such line, it first calls
  recall with the question's longest word, then answers from what came back;
- :func:`probe_judge_responder` grades a ``probe_judge`` request: ``CORRECT`` when the answer
  mentions the reference (``facts.mentions``), else ``INCORRECT``;
- :func:`from_scratch_responder` summarizes a ``from_scratch_summary`` request's transcript with
  :func:`summary_responder`, as if the transcript were the conversation;
- :func:`seeded_summary_responder` writes :func:`summary_responder`'s summary, of which a
  request with ``seed`` s keeps the first ``1 / (s + 1)`` of each section's lines: candidates
  asked with seeds 0, 1, 2, ... name fewer and fewer facts;
- :class:`EvalResponder` routes each of those, then self-summary requests, then the rest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from context_summarizer.core.facts import mentions
from context_summarizer.core.messages import content_text, message_text
from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.testing.responders import (
    Reply,
    Responder,
    ToolCallSpec,
    echo_responder,
    is_summary_request,
)
from context_summarizer.testing.summaries import summary_responder

__all__ = [
    "EvalResponder",
    "from_scratch_responder",
    "is_from_scratch_request",
    "is_probe_answer_request",
    "is_probe_judge_request",
    "probe_answer_responder",
    "probe_judge_responder",
    "seeded_summary_responder",
]

_WORD = re.compile(r"[a-z0-9_]{3,}")
_STOPWORDS = frozenset(
    {
        *("the", "and", "for", "was", "were", "what", "which", "who", "whom", "when", "where"),
        *("why", "how", "that", "this", "with", "from", "into", "does", "did", "has", "have"),
        *("had", "are", "its", "not", "but", "you", "your", "our", "their", "there", "then"),
        *("than", "they", "them"),
    }
)
IDK = "I don't know."


def _opening(name: str) -> str:
    """The fixed text a prompt starts with (up to its first placeholder or line break)."""
    text = load_prompt(name)
    return text.split("{", 1)[0].split("\n", 1)[0].strip()


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = body.get("messages")
    return [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []


def _tag(text: str, name: str) -> str | None:
    match = re.search(rf"<{name}>\n?(.*?)\n?</{name}>", text, flags=re.DOTALL)
    return match[1].strip() if match else None


def _last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user message, past the tool results of a recall round after it."""
    messages = _messages(body)
    while messages and messages[-1].get("role") == "tool":
        messages = messages[:-1]
        if messages and messages[-1].get("role") == "assistant":
            messages = messages[:-1]
    if not messages or messages[-1].get("role") != "user":
        return ""
    return content_text(messages[-1])


def _is_probe_question(text: str) -> bool:
    return text.startswith((_opening("probe_answer"), _opening("probe_answer_recall")))


def is_probe_answer_request(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` asks to answer a probe (its last user message is ``probe_answer.md``
    or ``probe_answer_recall.md``)."""
    return _is_probe_question(_last_user_text(body))


def is_probe_judge_request(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` asks to grade a probe answer (``probe_judge.md``)."""
    return _last_user_text(body).startswith(_opening("probe_judge"))


def is_from_scratch_request(body: Mapping[str, Any]) -> bool:
    """Whether ``body`` is a from-scratch summary request (``from_scratch_system.md`` first)."""
    messages = _messages(body)
    return bool(messages) and content_text(messages[0]) == load_prompt("from_scratch_system")


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def probe_answer_responder(body: dict[str, Any]) -> Reply:
    """The context line sharing the most words (at least two) with the question, else IDK; or,
    when that is IDK, the recall tool is offered and not yet answered, a recall call."""
    question = _tag(_last_user_text(body), "question") or ""
    wanted = _words(question)
    best, best_score = IDK, 1
    for message in _messages(body):
        if _is_probe_question(content_text(message)):
            continue
        for line in message_text(message).splitlines():
            score = len(wanted & _words(line))
            if score > best_score:
                best, best_score = line.strip(), score
    offered = any(
        isinstance(tool, Mapping) and (tool.get("function") or {}).get("name") == "recall"
        for tool in body.get("tools") or ()
    )
    recalled = any(m.get("tool_call_id") == "call_probe_recall" for m in _messages(body))
    if best == IDK and offered and not recalled and wanted:
        query = max(sorted(wanted), key=len)
        arguments = json.dumps({"query": query})
        return Reply(
            tool_calls=[ToolCallSpec(id="call_probe_recall", name="recall", arguments=arguments)]
        )
    return Reply(content=best)


def probe_judge_responder(body: dict[str, Any]) -> Reply:
    """``CORRECT`` when the answer mentions the reference answer, else ``INCORRECT``."""
    prompt = _last_user_text(body)
    reference = _tag(prompt, "reference") or ""
    answer = _tag(prompt, "answer") or ""
    correct = bool(reference) and mentions(answer, reference)
    return Reply(content="CORRECT" if correct else "INCORRECT")


def from_scratch_responder(body: dict[str, Any]) -> Reply:
    """``summary_responder`` over the transcript, given as the only (user) message."""
    transcript = _tag(_last_user_text(body), "transcript") or ""
    return summary_responder({"messages": [{"role": "user", "content": transcript}]})


def seeded_summary_responder(body: dict[str, Any]) -> Reply:
    """``summary_responder``'s summary; with a ``seed`` s in the request, each section keeps its
    heading and the first ``ceil(n / (s + 1))`` of its ``n`` lines."""
    full = summary_responder(body).content or ""
    seed = body.get("seed")
    if not isinstance(seed, int) or seed <= 0:
        return Reply(content=full)
    sections = []
    for section in full.split("\n\n"):
        heading, *lines = section.split("\n")
        kept = lines[: math.ceil(len(lines) / (seed + 1))]
        sections.append("\n".join([heading, *kept]))
    return Reply(content="\n\n".join(sections))


class EvalResponder:
    """Routes probe answers, probe grading, from-scratch and self-summary requests to their
    stand-ins (``summarize`` for self-summary requests), and anything else to ``agent``."""

    def __init__(
        self, agent: Responder = echo_responder, summarize: Responder = summary_responder
    ) -> None:
        self.agent = agent
        self.summarize = summarize

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_probe_judge_request(body):
            return probe_judge_responder(body)
        if is_probe_answer_request(body):
            return probe_answer_responder(body)
        if is_from_scratch_request(body):
            return from_scratch_responder(body)
        if is_summary_request(body):
            return self.summarize(body)
        return self.agent(body)
