"""The recall tool with a real model: Qwen2.5-Coder-0.5B-Instruct behind llama-cpp-python's
server, through ``summarizer serve``'s proxy (the in-process ``ProxyServer``).

Deselected by default (``-m real_model``; ``.ci/run`` runs it in the real-model stage). The
server runs with llama-cpp-python's ``chatml-function-calling`` chat format (the one of its
formats that turns a model's call into ``tool_calls``) and a 16,384-token context, so recall is
on (the tool and an index take under 3% of the window). A conversation whose first tool output
holds a fact arrives over the trigger and is compacted without a model (``ledger-only``: the
test is about the tool, not the summary); its last user message asks for that fact. What reaches
the model goes through a recording relay, so the test sees it exactly:

- the real server takes the recall tool beside the agent's and the summary's span list, and the
  client's answer never holds a recall call, whatever the model does (every round it asked
  for, if any, is one more request upstream);
- the round the loop sends when the model calls recall (the loop's own codec, the result read
  from the raw turns by the core) is one the real server takes and answers.

Whether the model calls the tool is printed, not required: this 0.5B model, at temperature 0,
answered from its context instead (a guess) in every phrasing tried through the proxy; in a
four-message context it did call recall. A 0.5B model is a floor, reported as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.core.recall_chat import CHAT
from context_summarizer.core.recall_tool import answer_call, read_call
from context_summarizer.core.spans import Span
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing.real_model import MODEL_ALIAS, LlamaServer, model_file

from .real_model_support import RecordingRelay

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1_200)]

N_CTX = 16_384
ERROR = "TokenExpiredError: the deploy token has expired"
FACT = "expired token id: DTK-7781"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    },
}


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    extra = ("--chat_format", "chatml-function-calling")
    with LlamaServer(model_file(), n_ctx=N_CTX, extra_args=extra) as server:
        yield server


def conversation(turns: int = 22, lines: int = 60) -> list[dict[str, Any]]:
    """A deploy session of ``turns`` shell calls (about 700 tokens each), the fact in the first
    output, and a last question the tool can answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful devops agent. Use the tools."},
        {"role": "user", "content": "Make ./deploy.sh work again."},
    ]
    for turn in range(turns):
        command = "./deploy.sh --verbose"
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": command})},
        }
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        lines = [f"[{turn:02d}:{i:02d}] step {i} of stage {turn}: ok" for i in range(60)]
        if turn == 0:
            lines.insert(30, f"ERROR {FACT}")
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "\n".join(lines)}
        )
    messages.append(
        {
            "role": "user",
            "content": "What exact error did ./deploy.sh print about the deploy token? Call the "
            "recall tool with a query to find it, then answer.",
        }
    )
    return messages


def test_the_recall_tool_reaches_the_real_server_and_its_round_is_accepted(
    llama: LlamaServer, tmp_path: Any
) -> None:
    messages = conversation()
    with RecordingRelay(llama.base_url) as relay:
        settings = Settings(
            upstream=relay.base_url,
            port=0,
            db=tmp_path / "checkpoints.db",
            context_window=N_CTX,
            policy="ledger-only",
            prepare_ratio=None,
            upstream_timeout=900,
        )
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(
                base_url=proxy.base_url, api_key="sk-local", max_retries=0, timeout=1_200
            )
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL_ALIAS, messages=messages, tools=[BASH], max_tokens=64, temperature=0
            )
            completion = raw.parse()
    assert all(entry.status == 200 for entry in relay.log), [e.answer for e in relay.log]
    assert raw.headers["x-summarizer-compacted"] == "true"
    agents = [entry for entry in relay.log if not entry.summary]
    first = agents[0]
    # The real server took the tool beside the agent's, and the span list in the summary.
    assert [tool["function"]["name"] for tool in first.body["tools"]] == ["bash", "recall"]
    (summary,) = [m["content"] for m in first.body["messages"] if "span-" in str(m["content"])]
    found = re.search(r"(span-[0-9a-f]{12}): messages (\d+)-(\d+)", summary)
    assert found is not None
    message = completion.choices[0].message
    assert not any(call.function.name == "recall" for call in message.tool_calls or ())
    assert first.answer is not None
    calls = first.answer["choices"][0]["message"].get("tool_calls") or []
    called = [c["function"]["arguments"] for c in calls if c["function"]["name"] == "recall"]
    # What the model did is reported, not required: a 0.5B model is a floor.
    report = {
        "called_recall": called,
        "rounds": int(raw.headers["x-summarizer-recall-rounds"]),
        "answer": message.content,
        "answer_holds_the_token": "DTK-7781" in (message.content or ""),
    }
    print(f"\n[real model] recall offered: {json.dumps(report)}")
    assert len(agents) == 1 + report["rounds"]

    # The round the loop sends when the model calls recall, built by the loop's own codec from
    # a recall call on this span, is one the real server takes, and the model answers from it.
    span = Span(found[1], int(found[2]) - 1, int(found[3]))
    arguments = json.dumps({"query": "expired token id"})
    call = {"id": "call_recall_0", "type": "function",
            "function": {"name": "recall", "arguments": arguments}}  # fmt: skip
    answer = {
        "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]
    }
    result = answer_call(read_call(arguments), [span], messages).render()
    assert FACT in result
    body = CHAT.continued(first.body, answer, [("call_recall_0", result)])
    body.pop("stream", None)
    body.pop("stream_options", None)
    reply = httpx2.post(f"{llama.base_url}/chat/completions", json=body, timeout=900)
    assert reply.status_code == 200, reply.text[:500]
    text = reply.json()["choices"][0]["message"].get("content") or ""
    print(f"[real model] answer from the recalled text: {json.dumps(text)}")
