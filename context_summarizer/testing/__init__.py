"""A local OpenAI-, Anthropic- and Gemini-compatible upstream for tests, the demo and benchmarks.

Real sockets on 127.0.0.1, driven by the real ``openai``, ``anthropic`` and ``google-genai``
SDKs: chat completions, the Responses API (JSON and SSE streaming, ``previous_response_id``,
compaction), Anthropic messages (JSON and SSE streaming) and Gemini's ``generateContent`` (JSON
and SSE streaming, thought signatures), with the server's own token and prompt-cache
accounting (OpenAI's automatic caching, Gemini's implicit one; Anthropic's explicit
breakpoints), a context window that rejects oversized prompts like each API does, scripted
replies, a tool-using script (``tool_script``) and injectable faults.
"""

from __future__ import annotations

from .accounting import PrefixCache, PromptTokenCounter, cached_tokens_for
from .agents import RoutingResponder, ScriptedToolAgent, Step
from .faults import Fault, anthropic_error_body, error_body
from .messages_cache import BreakpointCache, CacheUsage, MessagesPrompt, messages_prompt
from .messages_chat import chat_body_for
from .responders import Reply, Responder, ToolCallSpec, echo_responder, is_summary_request
from .server import TestUpstream
from .state import RecordedRequest
from .summaries import summary_responder
from .tool_script import ToolScript, ToolScriptError, load_tool_script
from .weak import WEAK_KINDS, WeakKind, weak_summary_responder

__all__ = [
    "WEAK_KINDS",
    "BreakpointCache",
    "CacheUsage",
    "Fault",
    "MessagesPrompt",
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
    "ToolScript",
    "ToolScriptError",
    "WeakKind",
    "anthropic_error_body",
    "cached_tokens_for",
    "chat_body_for",
    "echo_responder",
    "error_body",
    "is_summary_request",
    "load_tool_script",
    "messages_prompt",
    "summary_responder",
    "weak_summary_responder",
]
