"""The sessions the memory benchmark stores: distinct tool-using coding-agent conversations.

Each session is generated from its own seed, with its own task, repository, identifiers, file
names and tool-output sizes (``read_file``, ``grep``, ``run_tests``, ``list_dir`` calls and their
outputs, with some assistant reasoning), and counted exactly with tiktoken up to the size asked.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from context_summarizer.core.tokens import TiktokenCounter
from context_summarizer.loaders.tokenizers import load_encoding

MODEL = "gpt-4o-mini"
"""The model every request names (it picks the proxy's tokenizer)."""
KEYS = ("bench-memory-key-0", "bench-memory-key-1", "bench-memory-key-2", "bench-memory-key-3")
"""Session ``i`` is sent with ``KEYS[i % 4]``: four credential namespaces in one store."""
WARMUP_KEY = "bench-memory-warmup"
"""The warm-up's own key: a fifth namespace, outside the sessions counted."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Repository path."}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search the repository for a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression."},
                    "glob": {"type": "string", "description": "Files to search."},
                },
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite, or part of it.",
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string", "description": "Test path."}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a directory.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]

_VOCABULARY = (
    "invoice total ledger tax rate amount currency rounding cents customer order line item "
    "discount coupon refund payment gateway retry queue worker batch export report parser schema "
    "record field value config loader cache session token user account balance period month "
    "quarter fiscal vendor supplier shipment address region locale format timestamp window "
    "buffer stream chunk index offset cursor page limit filter sort key migration handler router "
    "request response client server upload archive snapshot metric counter gauge alert threshold "
    "budget forecast pricing plan tier subscription renewal trial credit debit statement"
)
_WORDS = _VOCABULARY.split()
_TASKS = (
    "Find why the {a} totals in {repo} are off by a few cents and fix it.",
    "The nightly {a} export in {repo} fails for some customers; find the cause and fix it.",
    "Add {a} support to the {b} parser of {repo}, with tests.",
    "Make the {a} {b} endpoint of {repo} paginate correctly; page two repeats items.",
    "Track down the flaky {a} test in {repo} and make it deterministic.",
    "Refactor the {a} {b} module of {repo} so the {c} logic lives in one place.",
    "Upgrade {repo} to the new {a} API and keep every {b} test passing.",
    "The {a} report of {repo} double-counts {b} rows after a retry; fix it.",
)
_SYSTEMS = (
    "You are a careful coding agent. Work in small steps and run the tests after each change.",
    "You are an autonomous software engineer. Read before you edit; explain each decision.",
    "You are a senior developer pairing with the user. Prefer minimal, well-tested changes.",
)


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(_WORDS, 2))


def _code_file(rng: random.Random, tag: str, lines: int) -> str:
    out = [f'"""{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} helpers ({tag})."""', ""]
    while len(out) < lines:
        name, arg, attr = _ident(rng), rng.choice(_WORDS), _ident(rng)
        out += [
            f"def {name}_{tag}(self, {arg}: int) -> int:",
            f"    {attr} = self.{attr} * {rng.randint(2, 999)} + {arg}",
            f"    if {attr} > {rng.randint(10, 99_999)}:  # {rng.choice(_WORDS)} {_ident(rng)}",
            f"        raise ValueError('{rng.choice(_WORDS)} {arg} out of range')",
            f"    return round({attr} / {rng.randint(2, 100)}, {rng.randint(0, 4)})",
            "",
        ]
    return "\n".join(out)


def _grep_output(rng: random.Random, repo: str, pattern: str, hits: int) -> str:
    return "\n".join(
        f"src/{repo}/{rng.choice(_WORDS)}/{_ident(rng)}.py:{rng.randint(1, 900)}:"
        f"    {pattern} = {_ident(rng)}({rng.choice(_WORDS)}, {rng.randint(0, 9999)})"
        for _ in range(hits)
    )


def _test_output(rng: random.Random, repo: str, cases: int) -> str:
    lines = []
    failed = 0
    for _ in range(cases):
        path = f"tests/test_{rng.choice(_WORDS)}.py::test_{_ident(rng)}"
        if rng.random() < 0.08:
            failed += 1
            lines.append(f"{path} FAILED")
            lines.append(
                f"E   AssertionError: expected {rng.randint(0, 99_999)} cents, "
                f"got {rng.randint(0, 99_999)} in {repo}.{_ident(rng)}"
            )
        else:
            lines.append(f"{path} PASSED")
    lines.append(
        f"==== {cases - failed} passed, {failed} failed in {rng.uniform(0.5, 40):.2f}s ===="
    )
    return "\n".join(lines)


def _listing(rng: random.Random, repo: str, entries: int) -> str:
    return "\n".join(
        f"{rng.choice(['-rw-r--r--', 'drwxr-xr-x'])} {rng.randint(80, 90_000):>6} "
        f"{repo}/{_ident(rng)}{rng.choice(['.py', '.md', '.toml', '/', '.json'])}"
        for _ in range(entries)
    )


def _tool_turn(
    rng: random.Random, repo: str, turn: int, tag: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One assistant tool call (sometimes with reasoning text) and the tool's output."""
    kind = rng.choices(["read_file", "grep", "run_tests", "list_dir"], weights=[5, 3, 2, 1])[0]
    if kind == "read_file":
        path = f"src/{repo}/{rng.choice(_WORDS)}/{_ident(rng)}.py"
        arguments: dict[str, str] = {"path": path}
        output = _code_file(rng, tag, rng.randint(30, 240))
    elif kind == "grep":
        pattern = _ident(rng)
        arguments = {"pattern": pattern, "glob": f"src/{repo}/**/*.py"}
        output = _grep_output(rng, repo, pattern, rng.randint(10, 80))
    elif kind == "run_tests":
        arguments = {"target": f"tests/test_{rng.choice(_WORDS)}.py"}
        output = _test_output(rng, repo, rng.randint(20, 120))
    else:
        arguments = {"path": f"src/{repo}/{rng.choice(_WORDS)}"}
        output = _listing(rng, repo, rng.randint(10, 60))
    call_id = f"call_{tag}_{turn}"
    content: str | None = None
    if rng.random() < 0.3:
        content = (
            f"The {rng.choice(_WORDS)} value comes from {_ident(rng)}; "
            f"next I check {arguments.get('path') or arguments.get('pattern') or 'the tests'}."
        )
        if rng.random() < 0.3:
            content += f" NOTE: {_ident(rng)} must stay below {rng.randint(10, 9999)}."
    call = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": kind, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return call, {"role": "tool", "tool_call_id": call_id, "content": output}


@dataclass
class Conversation:
    """One session's messages and their exact token count (tools and reply priming included)."""

    index: int
    messages: list[dict[str, Any]]
    tokens: int


class ConversationBuilder:
    """Distinct, deterministic tool-using sessions of a given size."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        # A private counter, uncached: the benchmark must not grow a cache of its own per session.
        self._counter = TiktokenCounter(load_encoding("o200k_base"), cache_size=0)
        self._tools_tokens = self._counter.count_tools(TOOLS) + 3

    def build(self, index: int) -> Conversation:
        """Session ``index``: its own seed, task, repository and tool outputs."""
        rng = random.Random(f"proxy-memory-{index}")
        repo = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{index}"
        a, b, c = rng.sample(_WORDS, 3)
        task = rng.choice(_TASKS).format(a=a, b=b, c=c, repo=repo)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": rng.choice(_SYSTEMS)},
            {"role": "user", "content": f"{task} (ticket {repo.upper()}-{rng.randint(1, 9999)})"},
        ]
        count = self._counter.count_message
        total = self._tools_tokens + sum(count(m) for m in messages)
        turn = 0
        while total < self.tokens:
            for message in _tool_turn(rng, repo, turn, f"s{index}"):
                messages.append(message)
                total += count(message)
            turn += 1
        return Conversation(index, messages, total)

    def follow_up(self, conversation: Conversation) -> list[dict[str, Any]]:
        """``conversation`` with one more tool turn, as the agent's next request."""
        rng = random.Random(f"proxy-memory-follow-up-{conversation.index}")
        repo = f"follow-up-{conversation.index}"
        call, output = _tool_turn(rng, repo, 10_000, f"s{conversation.index}")
        output["content"] = output["content"][:2_000]
        return [*conversation.messages, call, output]


def request_body(messages: Sequence[dict[str, Any]]) -> bytes:
    """A chat completion request for ``messages``, serialized."""
    body = {"model": MODEL, "messages": list(messages), "tools": TOOLS, "max_completion_tokens": 16}
    return json.dumps(body).encode()
