"""A local OpenAI-compatible upstream for tests, the demo and benchmarks.

Real sockets on 127.0.0.1, driven by the real ``openai`` SDK: chat completions and the
Responses API (JSON and SSE streaming, ``previous_response_id``, compaction) with the server's
own token and prompt-cache accounting, a context window that rejects oversized prompts like
OpenAI does, scripted replies and injectable faults.
"""

from __future__ import annotations

from .accounting import PrefixCache, PromptTokenCounter, cached_tokens_for
from .agents import RoutingResponder, ScriptedToolAgent, Step
from .faults import Fault, error_body
from .responders import Reply, Responder, ToolCallSpec, echo_responder, is_summary_request
from .server import TestUpstream
from .state import RecordedRequest
from .summaries import summary_responder
from .weak import WEAK_KINDS, WeakKind, weak_summary_responder

__all__ = [
    "WEAK_KINDS",
    "Fault",
    "PrefixCache",
    "PromptTokenCounter",
    "RecordedRequest",
    "Reply",
    "Responder",
    "RoutingResponder",
    "ScriptedToolAgent",
    "Step",
    "TestUpstream",
    "ToolCallSpec",
    "WeakKind",
    "cached_tokens_for",
    "echo_responder",
    "error_body",
    "is_summary_request",
    "summary_responder",
    "weak_summary_responder",
]
