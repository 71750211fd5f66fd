"""Driving the proxy's Gemini front door with the real ``google-genai`` SDK: the client, an agent
loop over a ``CodingSession``, and readers of what the test upstream received."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google import genai
from google.genai import types

from context_summarizer.cli.test_upstream_serve import is_proxy_summary
from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import RecordedRequest, TestUpstream
from context_summarizer.testing.scenario import CodingSession

MODEL = "gemini-2.5-flash"
KEY = "gemini-test-key-0123456789"
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)


def root(proxy: ProxyServer) -> str:
    """The proxy's address without ``/v1``: what ``HttpOptions.base_url`` takes."""
    return proxy.base_url.removesuffix("/v1")


def gemini_client(proxy: ProxyServer, key: str = KEY) -> genai.Client:
    """A ``google-genai`` client of the proxy (API version ``v1beta``)."""
    options = types.HttpOptions(base_url=root(proxy), api_version="v1beta")
    return genai.Client(api_key=key, http_options=options)


def gemini_tools(session: CodingSession) -> list[types.Tool]:
    """The session's tools as Gemini function declarations."""
    declarations = [
        types.FunctionDeclaration(
            name=tool["function"]["name"],
            description=tool["function"]["description"],
            parameters_json_schema=tool["function"]["parameters"],
        )
        for tool in session.tools
    ]
    return [types.Tool(function_declarations=declarations)]


def merged(parts: list[types.Part]) -> list[types.Part]:
    """A streamed answer's parts as one content: consecutive plain text pieces joined."""
    out: list[types.Part] = []
    for part in parts:
        plain = part.text is not None and not part.thought and part.thought_signature is None
        last = out[-1] if out else None
        if plain and last is not None and last.text is not None and not last.thought:
            last.text += part.text or ""
        else:
            out.append(part.model_copy(deep=True))
    return out


def session_config(session: CodingSession, *, thinking: bool) -> types.GenerateContentConfig:
    """What the agent sends besides its contents: the session's system instruction and tools,
    thoughts asked for (``thinking``), a 500-token reply cap."""
    return types.GenerateContentConfig(
        system_instruction=session.system["content"],
        tools=gemini_tools(session),  # type: ignore[arg-type]
        automatic_function_calling=NO_AUTO,
        thinking_config=types.ThinkingConfig(include_thoughts=True) if thinking else None,
        max_output_tokens=500,
    )


def run_session(
    client: genai.Client,
    session: CodingSession,
    *,
    steps: int,
    stream: bool = False,
    thinking: bool = True,
) -> list[types.Content]:
    """An agent loop on the SDK: ``steps`` tool-using turns; the final history."""
    config = session_config(session, thinking=thinking)
    task = types.Part(text=session.task["content"])
    contents: list[types.Content] = [types.Content(role="user", parts=[task])]
    for turn in range(steps + 1):
        if stream:
            chunks = client.models.generate_content_stream(
                model=MODEL, contents=contents, config=config
            )
            parts = [p for c in chunks if c.candidates for p in c.candidates[0].content.parts]  # type: ignore[union-attr]
            said = types.Content(role="model", parts=merged(parts))
        else:
            answer = client.models.generate_content(model=MODEL, contents=contents, config=config)
            assert answer.candidates and answer.candidates[0].content
            said = answer.candidates[0].content
        contents.append(said)
        calls = [p.function_call for p in said.parts or () if p.function_call]
        if not calls:
            break
        results = [
            types.Part.from_function_response(
                name=call.name or "",
                response={"output": session.execute(turn, call.name or "", call.args or {})},
            )
            for call in calls
        ]
        contents.append(types.Content(role="user", parts=results))
    return contents


def gemini_requests(upstream: TestUpstream, *, summary: bool = False) -> list[RecordedRequest]:
    """The generate requests the upstream answered, the agent's or the summary calls."""
    return [r for r in upstream.requests if r.api == "gemini" and r.is_summary == summary]


def is_summary_content(content: Mapping[str, Any]) -> bool:
    """Whether a Gemini content is a summary the proxy wrote."""
    text = "".join(part.get("text", "") for part in content["parts"])
    return is_proxy_summary({"role": content["role"], "content": text})


def part_texts(contents: list[dict[str, Any]]) -> list[str]:
    """Every text, function call argument and function response of ``contents``."""
    out: list[str] = []
    for content in contents:
        for part in content.get("parts", ()):
            if isinstance(part.get("text"), str):
                out.append(part["text"])
            for key in ("functionCall", "functionResponse"):
                if key in part:
                    out.append(str(part[key]))
    return out


def pairs_intact(contents: list[dict[str, Any]]) -> bool:
    """Whether every model content's function calls are answered, one for one and by name, by
    the user content right after it, and every function response answers such a call."""
    for index, content in enumerate(contents):
        parts = content.get("parts", [])
        calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
        responses = [p["functionResponse"]["name"] for p in parts if "functionResponse" in p]
        if responses:
            before = contents[index - 1] if index else {}
            asked = [
                p["functionCall"]["name"] for p in before.get("parts", []) if "functionCall" in p
            ]
            if before.get("role") != "model" or sorted(asked) != sorted(responses):
                return False
        if calls:
            after = contents[index + 1] if index + 1 < len(contents) else None
            if after is None:
                return False
            answered = [
                p["functionResponse"]["name"] for p in after["parts"] if "functionResponse" in p
            ]
            if sorted(answered) != sorted(calls):
                return False
    return True
