"""The Gemini codec: what the engine sees of a generateContent request, and what goes back."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from context_summarizer.core.codecs import OPAQUE_KEY
from context_summarizer.core.codecs.gemini import GeminiCodec
from context_summarizer.core.errors import InvalidConversation
from context_summarizer.core.messages import group_units, message_digest, validate_messages

codec = GeminiCodec()


def _body() -> dict[str, Any]:
    return {
        "systemInstruction": {"role": "user", "parts": [{"text": "You fix bugs."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "run_shell_command",
                        "description": "Run a command",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {"command": {"type": "string"}},
                        },
                    },
                    {"name": "read_file", "parameters": {"type": "OBJECT"}},
                ]
            },
            {"googleSearch": {}},
        ],
        "generationConfig": {"temperature": 0, "thinkingConfig": {"includeThoughts": True}},
        "contents": [
            {"role": "user", "parts": [{"text": "Fix the failing test in parser.py"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Look at the test first.", "thought": True},
                    {"text": "Running the tests."},
                    {
                        "functionCall": {
                            "id": "c-1",
                            "name": "run_shell_command",
                            "args": {"command": "pytest"},
                        },
                        "thoughtSignature": "c2lnLTE=",
                    },
                    {"functionCall": {"name": "read_file", "args": {"path": "parser.py"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "c-1",
                            "name": "run_shell_command",
                            "response": {"output": "1 failed"},
                        }
                    },
                    {
                        "functionResponse": {
                            "name": "read_file",
                            "response": {"content": "def parse(): ...", "lines": 1},
                        }
                    },
                    {"text": "Also keep the API stable."},
                ],
            },
            {"role": "model", "parts": [{"text": "Will do.", "thoughtSignature": "c2lnLTI="}]},
            {
                "role": "user",
                "parts": [
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                    {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/spec.pdf"}},
                    {"text": "What is this?"},
                ],
            },
        ],
    }


def test_decode_reads_calls_responses_media_and_keeps_thoughts_opaque() -> None:
    decoded = codec.decode(_body())
    roles = [m["role"] for m in decoded.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "user"]
    assert decoded.system_items == 1
    assert decoded.messages[0] == {
        "role": "system",
        "content": [{"type": "text", "text": "You fix bugs."}],
    }
    assistant = decoded.messages[2]
    assert assistant["content"] == [{"type": "text", "text": "Running the tests."}]
    # The call's own id; a call without one gets its content's and part's position.
    assert [c["id"] for c in assistant["tool_calls"]] == ["c-1", "gemini:1:3"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"command": "pytest"}
    # The thought is carried whole; the signature of the call with it.
    assert assistant[OPAQUE_KEY] == [
        {"text": "Look at the test first.", "thought": True},
        {"thoughtSignature": "c2lnLTE="},
    ]
    # Paired by id, then by name; a lone "output" is the text, anything else its JSON.
    assert decoded.messages[3] == {"role": "tool", "tool_call_id": "c-1", "content": "1 failed"}
    assert decoded.messages[4] == {
        "role": "tool",
        "tool_call_id": "gemini:1:3",
        "content": '{"content":"def parse(): ...","lines":1}',
    }
    assert decoded.messages[5]["content"] == [{"type": "text", "text": "Also keep the API stable."}]
    assert decoded.messages[6][OPAQUE_KEY] == [{"thoughtSignature": "c2lnLTI="}]
    assert decoded.messages[7]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "file", "file": {"file_data": "gs://b/spec.pdf"}},
        {"type": "text", "text": "What is this?"},
    ]
    # Function declarations are counted (either schema field); googleSearch is not.
    assert decoded.tools == [
        {
            "type": "function",
            "function": {
                "name": "run_shell_command",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "OBJECT"}}},
    ]
    validate_messages(decoded.messages)
    kinds = [u.kind for u in group_units(decoded.messages)]
    assert kinds == ["instruction", "user", "tool_exchange", "user", "assistant", "user"]


def test_everything_kept_encodes_to_the_clients_own_content_objects() -> None:
    body = _body()
    before = copy.deepcopy(body)
    decoded = codec.decode(body)
    contents = codec.encode(decoded, decoded.messages)["contents"]
    assert len(contents) == len(body["contents"])
    assert all(a is b for a, b in zip(contents, body["contents"], strict=True))
    assert body == before, "decoding and encoding never change the client's body"


def test_a_summary_replacing_a_prefix_keeps_the_rest_byte_for_byte() -> None:
    body = _body()
    decoded = codec.decode(body)
    summary = {"role": "user", "content": "[Context summary] parser.py has a failing test."}
    # The engine keeps the instruction, writes a summary for the first exchange and keeps the
    # rest (from the text that closed the mixed user turn on).
    kept = [decoded.messages[0], summary, *decoded.messages[5:]]
    contents = codec.encode(decoded, kept)["contents"]
    assert contents[0] == {"role": "user", "parts": [{"text": summary["content"]}]}
    # The mixed turn keeps only its text part; the rest are the client's own objects.
    assert contents[1] == {"role": "user", "parts": [body["contents"][2]["parts"][2]]}
    assert contents[1]["parts"][0] is body["contents"][2]["parts"][2]
    assert contents[2] is body["contents"][3] and contents[3] is body["contents"][4]
    wire = json.dumps(contents[2])
    assert '"thoughtSignature": "c2lnLTI="' in wire


def test_a_shortened_tool_result_replaces_its_part_in_its_own_content() -> None:
    body = _body()
    decoded = codec.decode(body)
    shortened = {"role": "tool", "tool_call_id": "gemini:1:3", "content": "[cut] def parse"}
    kept = [*decoded.messages[:4], shortened, *decoded.messages[5:]]
    contents = codec.encode(decoded, kept)["contents"]
    turn = contents[2]
    assert turn["role"] == "user" and len(turn["parts"]) == 3
    assert turn["parts"][0] is body["contents"][2]["parts"][0]
    assert turn["parts"][1] == {
        "functionResponse": {"name": "read_file", "response": {"output": "[cut] def parse"}}
    }
    assert turn["parts"][2] is body["contents"][2]["parts"][2]
    # The call it answers goes back as sent, its signature included.
    assert contents[1] is body["contents"][1]


def test_a_function_call_with_a_thought_signature_survives_byte_for_byte() -> None:
    body = _body()
    raw = json.dumps(body["contents"][1])
    decoded = codec.decode(body)
    summary = {"role": "user", "content": "[Context summary] the task."}
    contents = codec.encode(decoded, [decoded.messages[0], summary, *decoded.messages[2:]])
    assert json.dumps(contents["contents"][1]) == raw


def test_a_changed_signature_is_a_different_message() -> None:
    body = _body()
    other = copy.deepcopy(body)
    other["contents"][1]["parts"][2]["thoughtSignature"] = "b3RoZXI="
    first, second = codec.decode(body), codec.decode(other)
    assert message_digest(first.messages[2]) != message_digest(second.messages[2])
    assert message_digest(first.messages[1]) == message_digest(second.messages[1])


def test_code_execution_parts_are_opaque_and_unknown_parts_are_carried() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "Compute 2+2"}]},
            {
                "role": "model",
                "parts": [
                    {"executableCode": {"language": "PYTHON", "code": "print(2+2)"}},
                    {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "4\n"}},
                    {"text": "It is 4."},
                ],
            },
            {"role": "user", "parts": [{"videoMetadata": {"fps": 1}}, {"text": "And 3+3?"}]},
        ]
    }
    decoded = codec.decode(body)
    model = decoded.messages[1]
    assert model["content"] == [{"type": "text", "text": "It is 4."}]
    assert model[OPAQUE_KEY] == body["contents"][1]["parts"][:2]
    user = decoded.messages[2]
    assert user["content"] == [{"type": "text", "text": "And 3+3?"}]
    assert user[OPAQUE_KEY] == [{"videoMetadata": {"fps": 1}}]
    assert codec.encode(decoded, decoded.messages)["contents"] == body["contents"]


def test_snake_case_fields_and_a_string_system_instruction_are_read() -> None:
    body = {
        "system_instruction": "Be brief.",
        "tools": [{"function_declarations": [{"name": "ls", "parameters_json_schema": {}}]}],
        "contents": [
            {"parts": [{"text": "list"}]},  # no role: a user content
            {"role": "model", "parts": [{"function_call": {"name": "ls", "args": {}}}]},
            {
                "role": "function",
                "parts": [{"function_response": {"name": "ls", "response": {"error": "denied"}}}],
            },
        ],
    }
    decoded = codec.decode(body)
    assert decoded.messages[0] == {"role": "system", "content": "Be brief."}
    assert decoded.messages[2]["tool_calls"][0]["id"] == "gemini:1:0"
    assert decoded.messages[3] == {
        "role": "tool",
        "tool_call_id": "gemini:1:0",
        "content": "denied",
        "is_error": True,
    }
    assert decoded.tools == [{"type": "function", "function": {"name": "ls", "parameters": {}}}]
    shortened = {**decoded.messages[3], "content": "den"}
    contents = codec.encode(decoded, [*decoded.messages[:3], shortened])["contents"]
    assert contents[2]["parts"][0] == {
        "function_response": {"name": "ls", "response": {"error": "den"}}
    }


def test_parallel_calls_of_one_name_pair_in_order_across_response_contents() -> None:
    call = {"functionCall": {"name": "read_file", "args": {"path": "a"}}}
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "read two"}]},
            {"role": "model", "parts": [call, copy.deepcopy(call)]},
            {"role": "user", "parts": [_response("read_file", "A")]},
            {"role": "user", "parts": [_response("read_file", "B")]},
        ]
    }
    decoded = codec.decode(body)
    assert [m.get("tool_call_id") for m in decoded.messages[2:]] == ["gemini:1:0", "gemini:1:1"]
    assert [u.kind for u in group_units(decoded.messages)] == ["user", "tool_exchange"]


def _response(name: str, output: str) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": {"output": output}}}


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def mutate(body: dict[str, Any]) -> None:
        target: Any = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "param"),
    [
        (_set(("contents",), []), "contents"),
        (_set(("contents", 0), "hi"), "contents[0]"),
        (_set(("contents", 0, "role"), "assistant"), "contents[0].role"),
        (_set(("contents", 0, "parts"), []), "contents[0].parts"),
        (_set(("contents", 0, "parts", 0), 7), "contents[0].parts[0]"),
        (_set(("contents", 0, "parts", 0, "text"), 7), "contents[0].parts[0].text"),
        (
            _set(("contents", 1, "parts", 3, "functionCall"), {"args": {}}),
            "contents[1].parts[3].functionCall.name",
        ),
        (
            _set(("contents", 1, "parts", 3, "functionCall", "args"), [1]),
            "contents[1].parts[3].functionCall.args",
        ),
        # A response naming no call of the model content before it.
        (
            _set(("contents", 2, "parts", 1, "functionResponse", "name"), "write_file"),
            "contents[2].parts[1]",
        ),
        (_set(("contents", 0, "parts", 0), _response("read_file", "x")), "contents[0].parts[0]"),
        (_set(("contents", 3, "parts", 0), _response("read_file", "x")), "contents[3].parts[0]"),
        (
            _set(("contents", 4, "parts", 0), {"functionCall": {"name": "ls"}}),
            "contents[4].parts[0]",
        ),
        (
            _set(("systemInstruction",), {"parts": [{"inlineData": {}}]}),
            "systemInstruction.parts[0]",
        ),
        (_set(("systemInstruction",), 3), "systemInstruction"),
    ],
)
def test_a_malformed_request_names_the_field(mutate: Any, param: str) -> None:
    body = _body()
    mutate(body)
    with pytest.raises(InvalidConversation) as caught:
        codec.decode(body)
    assert caught.value.param == param


def test_a_second_response_to_one_call_is_refused() -> None:
    body = _body()
    body["contents"][2]["parts"].append(copy.deepcopy(body["contents"][2]["parts"][0]))
    with pytest.raises(InvalidConversation) as caught:
        codec.decode(body)
    assert caught.value.param == "contents[2].parts[3]"
