"""The test upstream's Gemini API, driven by the real ``google-genai`` SDK over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import errors, types

from context_summarizer.testing import Fault, Reply, TestUpstream, ToolCallSpec
from context_summarizer.testing.gemini_chat import signature_for

MODEL = "gemini-2.5-flash"
TOOL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="read_file",
            description="Read a file",
            parameters_json_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        )
    ]
)
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=4_000) as server:
        yield server


def client_for(upstream: TestUpstream, key: str = "gemini-test-key") -> genai.Client:
    options = types.HttpOptions(base_url=upstream.root_url, api_version="v1beta")
    return genai.Client(api_key=key, http_options=options)


def test_generate_answers_with_usage_and_is_recorded_as_gemini(upstream: TestUpstream) -> None:
    upstream.enqueue("Hello from the test model.")
    client = client_for(upstream)
    answer = client.models.generate_content(model=MODEL, contents="Say hello")
    assert answer.text == "Hello from the test model."
    assert answer.candidates and answer.candidates[0].finish_reason == types.FinishReason.STOP
    usage = answer.usage_metadata
    assert usage is not None and usage.prompt_token_count and usage.candidates_token_count == 6
    assert usage.total_token_count == usage.prompt_token_count + 6
    request = upstream.requests[-1]
    assert request.api == "gemini" and request.path == f"/v1beta/models/{MODEL}:generateContent"
    assert request.headers["x-goog-api-key"] == "gemini-test-key"
    assert request.prompt_tokens == usage.prompt_token_count and not request.is_summary


def test_a_stream_reports_the_prompt_on_every_chunk_and_the_rest_on_the_last(
    upstream: TestUpstream,
) -> None:
    upstream.enqueue("one two three four five six seven")
    client = client_for(upstream)
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="Count"))
    assert len(chunks) > 2
    assert "".join(chunk.text or "" for chunk in chunks) == "one two three four five six seven"
    prompt = upstream.requests[-1].prompt_tokens
    for chunk in chunks[:-1]:
        assert chunk.usage_metadata is not None
        assert chunk.usage_metadata.prompt_token_count == prompt
        assert chunk.usage_metadata.candidates_token_count is None
        assert chunk.candidates and chunk.candidates[0].finish_reason is None
    last = chunks[-1]
    assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata is not None and last.usage_metadata.candidates_token_count == 7


def _call_history(client: genai.Client, thinking: bool) -> list[types.Content]:
    config = types.GenerateContentConfig(
        tools=[TOOL],
        automatic_function_calling=NO_AUTO,
        thinking_config=types.ThinkingConfig(include_thoughts=True) if thinking else None,
    )
    asked = types.Content(role="user", parts=[types.Part(text="Read a.txt")])
    answer = client.models.generate_content(model=MODEL, contents=[asked], config=config)
    assert answer.candidates and answer.candidates[0].content
    said = answer.candidates[0].content
    result = types.Part.from_function_response(name="read_file", response={"output": "A"})
    return [asked, said, types.Content(role="user", parts=[result])]


def test_a_scripted_call_is_a_function_call_signed_when_thinking_is_on(
    upstream: TestUpstream,
) -> None:
    client = client_for(upstream)
    upstream.enqueue(Reply(tool_calls=[ToolCallSpec(name="read_file", arguments={"path": "a"})]))
    history = _call_history(client, thinking=True)
    parts = history[1].parts or []
    assert parts[0].thought is True and parts[0].text
    call = parts[1]
    assert call.function_call is not None and call.function_call.name == "read_file"
    assert call.function_call.args == {"path": "a"} and call.function_call.id is None
    assert call.thought_signature is not None
    sent = json.loads(json.dumps(upstream.requests[-1].body))
    assert sent["tools"][0]["functionDeclarations"][0]["name"] == "read_file"

    thinking = types.GenerateContentConfig(
        tools=[TOOL],
        automatic_function_calling=NO_AUTO,
        thinking_config=types.ThinkingConfig(include_thoughts=True),
    )
    upstream.enqueue("A holds A.")
    answer = client.models.generate_content(model=MODEL, contents=history, config=thinking)
    assert answer.text == "A holds A."
    # Gemini 3's rule: the signature must come back, unaltered.
    call.thought_signature = None
    with pytest.raises(errors.ClientError) as missing:
        client.models.generate_content(model=MODEL, contents=history, config=thinking)
    assert missing.value.code == 400 and "thought_signature" in str(missing.value.message)
    call.thought_signature = b"forged"
    with pytest.raises(errors.ClientError) as forged:
        client.models.generate_content(model=MODEL, contents=history, config=thinking)
    assert "Corrupted thought signature" in str(forged.value.message)


def test_without_thinking_a_call_has_no_signature_and_needs_none(upstream: TestUpstream) -> None:
    client = client_for(upstream)
    upstream.enqueue(Reply(tool_calls=[ToolCallSpec(name="read_file", arguments={"path": "a"})]))
    history = _call_history(client, thinking=False)
    parts = history[1].parts or []
    assert len(parts) == 1 and parts[0].thought_signature is None
    config = types.GenerateContentConfig(tools=[TOOL], automatic_function_calling=NO_AUTO)
    assert client.models.generate_content(model=MODEL, contents=history, config=config).text


def test_a_structured_output_request_gets_a_value_of_its_schema(upstream: TestUpstream) -> None:
    upstream.enqueue("never used")
    schema = {
        "type": "OBJECT",
        "properties": {
            "complexity_reasoning": {"type": "STRING"},
            "complexity_score": {"type": "INTEGER", "minimum": 1},
            "route": {"type": "string", "enum": ["flash", "pro"]},
        },
        "required": ["complexity_reasoning", "complexity_score"],
    }
    config = types.GenerateContentConfig(
        response_mime_type="application/json", response_json_schema=schema
    )
    client = client_for(upstream)
    answer = client.models.generate_content(model=MODEL, contents="Route this", config=config)
    assert json.loads(answer.text or "") == {
        "complexity_reasoning": "test",
        "complexity_score": 1,
        "route": "flash",
    }
    assert upstream.pending_replies == 1, "a structured-output request takes no scripted reply"


def test_a_prompt_over_the_window_gets_geminis_400(upstream: TestUpstream) -> None:
    client = client_for(upstream)
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="word " * 5_000)
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens allowed (4000)" in str(caught.value.message)
    assert upstream.requests[-1].status == 400 and upstream.requests[-1].prompt_tokens


def test_an_injected_rate_limit_is_googles_429(upstream: TestUpstream) -> None:
    upstream.inject(Fault(kind="rate_limit"))
    client = client_for(upstream)
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="hi")
    assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED"


def test_a_repeated_long_prefix_is_reported_cached(upstream: TestUpstream) -> None:
    upstream.context_window = None
    long = types.Content(role="user", parts=[types.Part(text="context line " * 600)])
    ok = types.Content(role="model", parts=[types.Part(text="ok")])
    client = client_for(upstream)
    first = client.models.generate_content(model=MODEL, contents=[long, ok, "first"])
    second = client.models.generate_content(model=MODEL, contents=[long, ok, "second"])
    assert first.usage_metadata and first.usage_metadata.cached_content_token_count is None
    assert second.usage_metadata and (second.usage_metadata.cached_content_token_count or 0) > 1000
    assert upstream.requests[-1].cached_tokens == second.usage_metadata.cached_content_token_count


def _summary_body() -> dict[str, Any]:
    return {
        "contents": [{"role": "user", "parts": [{"text": "Summarize the conversation."}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
    }


def test_a_request_that_allows_no_call_is_recorded_as_a_summary(upstream: TestUpstream) -> None:
    answer = httpx2.post(
        f"{upstream.root_url}/v1beta/models/{MODEL}:generateContent", json=_summary_body()
    )
    assert answer.status_code == 200
    assert upstream.requests[-1].is_summary


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        (f"/v1beta/models/{MODEL}:embedContent", {}, 404),
        (f"/v1beta/models/{MODEL}:generateContent", {"contents": []}, 400),
        (f"/v1beta/models/{MODEL}:generateContent", {"contents": [{"parts": []}]}, 400),
    ],
)
def test_errors_take_googles_shape(
    upstream: TestUpstream, path: str, body: dict[str, Any], status: int
) -> None:
    answer = httpx2.post(upstream.root_url + path, json=body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert set(error) == {"code", "message", "status"} and error["code"] == status


def test_a_stream_without_alt_sse_is_a_json_array(upstream: TestUpstream) -> None:
    upstream.enqueue("one two three")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    answer = httpx2.post(
        f"{upstream.root_url}/v1beta/models/{MODEL}:streamGenerateContent", json=body
    )
    chunks = answer.json()
    assert isinstance(chunks, list) and len(chunks) > 1
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert signature_for("x", {}) != signature_for("y", {})


def test_googles_dummy_signatures_are_accepted(upstream: TestUpstream) -> None:
    contents = [
        {"role": "user", "parts": [{"text": "Read a"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "read_file", "args": {"path": "a"}},
                    "thoughtSignature": "skip_thought_signature_validator",
                }
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]},
    ]
    body = {"contents": contents, "generationConfig": {"thinkingConfig": {}}}
    answer = httpx2.post(f"{upstream.root_url}/v1beta/models/{MODEL}:generateContent", json=body)
    assert answer.status_code == 200
    contents[1]["parts"][0]["thoughtSignature"] = "c2tpcA=="
    refused = httpx2.post(f"{upstream.root_url}/v1beta/models/{MODEL}:generateContent", json=body)
    assert refused.status_code == 400 and "Corrupted" in refused.json()["error"]["message"]


def test_calls_must_be_answered_one_for_one(upstream: TestUpstream) -> None:
    result = {"functionResponse": {"name": "read_file", "response": {"output": "A"}}}
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "Read a"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
            {"role": "user", "parts": [result, result]},
        ]
    }
    answer = httpx2.post(f"{upstream.root_url}/v1beta/models/{MODEL}:generateContent", json=body)
    assert answer.status_code == 400
    assert "number of function response parts" in answer.json()["error"]["message"]
    body["contents"][2]["parts"] = [result]
    answer = httpx2.post(f"{upstream.root_url}/v1beta/models/{MODEL}:generateContent", json=body)
    assert answer.status_code == 200


def test_the_generate_methods_are_served_under_v1_too(upstream: TestUpstream) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    answer = httpx2.post(f"{upstream.base_url}/models/{MODEL}:generateContent", json=body)
    assert answer.status_code == 200 and upstream.requests[-1].api == "gemini"
    assert answer.json()["candidates"][0]["content"]["parts"] == [{"text": "ok"}]
    # An OpenAI model's own route is unchanged.
    assert httpx2.get(f"{upstream.base_url}/models/test-model").json()["id"] == "test-model"
