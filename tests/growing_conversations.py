"""Building blocks of the random growing conversations the state machines drive.

Every message text opens with a tag unique to the message (``[t<example>-<n>]``), so a test can
tell which conversation a message, or a summary mentioning it, came from. The rest is words
(realistic token counts) chosen by the message's size alone: the state machines draw only sizes,
and a message's token count depends on nothing else (tags have fixed-width numbers). So a
program replays exactly, and deleting one step while shrinking leaves every other message's size
as it was, which lets Hypothesis shrink failures to short programs.
"""

from __future__ import annotations

import base64
import itertools
import random
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import Bundle, RuleBasedStateMachine, precondition, rule

from context_summarizer.core.messages import group_units
from context_summarizer.testing import PromptTokenCounter

Message = dict[str, Any]

MODEL = "gpt-4o-mini"
TAG_PATTERN = re.compile(r"\[t\d{6}-\d{4}\]")
MAX_CONVERSATIONS = 3
MAX_MID_INSTRUCTIONS = 2
"""Mid-conversation system/developer messages per conversation: all must be kept verbatim, so
the generator bounds them to keep the must-keep parts well under the window."""

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "A file path."}},
                "required": ["path"],
            },
        },
    }
    for name, description in (
        ("read_file", "Read a file of the repository."),
        ("run_tests", "Run the tests under a path."),
        ("search_code", "Search the repository for a pattern."),
    )
]

_WORDS = """the a of to and in is that it for on with as was by at be this from or have an
which one all were there their when up out into so can more other some time could than then
these two may first like only new work over such after also use way most well down should
because each just those how make good where through long much before same right still own
find any between change end point part number order read test build file module function value
error result check return class method config cache token window message request response
server client session prefix summary budget compact output input parse write update merge
branch commit review patch deploy queue worker retry timeout limit field record index table
query schema column migrate invoice ledger balance payment account report export import
handler router parser lexer buffer stream socket thread process signal event state""".split()  # noqa: SIM905

_TEXT = random.Random(11).choices(_WORDS, k=50_000)
"""A fixed stream of words; each text is a slice of it, starting where its seed says."""
_NONCES = itertools.count(1)


def new_nonce() -> int:
    """A number unique to this run's example: tags (and so first messages) never repeat."""
    return next(_NONCES)


def _png(size: int = 16) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB
    rows = (b"\x00" + b"\x30\x90\xc0" * size) * size
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


IMAGE_URL = "data:image/png;base64," + base64.b64encode(_png()).decode("ascii")
"""A 16x16 PNG as a data: URL."""


class Tags:
    """Tags and texts for one example: ``[t<nonce>-<n>]``, then words chosen by their count."""

    def __init__(self, nonce: int) -> None:
        self.nonce = nonce
        self._numbers: Iterator[int] = itertools.count(1)

    def text(self, words: int, *, lines: bool = False) -> str:
        """A new tag followed by ``words`` words (in lines of about 12 when ``lines``)."""
        n = next(self._numbers)
        return f"[t{self.nonce:06d}-{n:04d}] {self.words(words, seed=words, lines=lines)}".rstrip()

    def words(self, count: int, *, seed: int, lines: bool = False) -> str:
        """``count`` words without a tag, the same for the same ``seed``."""
        start = (seed * 7_919) % (len(_TEXT) - 1)
        picked = list(itertools.islice(itertools.cycle(_TEXT), start, start + max(0, count)))
        if lines:
            return "\n".join(" ".join(picked[i : i + 12]) for i in range(0, len(picked), 12))
        return " ".join(picked)

    def call_id(self) -> str:
        """A tool call id unique to this example."""
        return f"call_t{self.nonce:06d}_{next(self._numbers):04d}"


def scale(fraction: int, low: int, high: int) -> int:
    """``fraction`` (0..100) of the way from ``low`` to ``high``."""
    return low + (max(0, high - low) * max(0, min(100, fraction))) // 100


@dataclass
class Sizes:
    """Word counts per kind of message, for a window of ``window`` tokens.

    Chosen so that everything a correct compaction must keep (the system prompt, the task, two
    mid-conversation instructions, the latest user message with an image, the final tool unit)
    stays well under the usable window, while tool outputs of up to a quarter of the window make
    conversations cross the trigger every few turns.
    """

    window: int

    @property
    def user(self) -> int:
        """A user message's text."""
        return max(8, self.window * 3 // 100)

    @property
    def assistant(self) -> int:
        """An assistant's text answer."""
        return max(8, self.window * 10 // 100)

    @property
    def tool_unit(self) -> int:
        """All outputs of one tool exchange together (each output at most this)."""
        return self.window * 22 // 100


@dataclass
class Conversation:
    """One agent's raw history, as it grows."""

    messages: list[Message]
    tenant: int = 0
    """Which API key sends it (proxy machine)."""
    mid_instructions: int = 0
    last_sent: list[Message] | None = None
    """The raw messages of its latest request, for a retry."""


def start(tags: Tags) -> Conversation:
    """A new conversation: a system prompt and a user task."""
    return Conversation(
        messages=[
            {"role": "system", "content": tags.text(30)},
            {"role": "user", "content": tags.text(25)},
        ],
    )


def user_message(tags: Tags, words: int) -> Message:
    """A plain user message."""
    return {"role": "user", "content": tags.text(words)}


def image_message(tags: Tags, words: int) -> Message:
    """A user message with a text part and a small PNG."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": tags.text(words)},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        ],
    }


def assistant_text(tags: Tags, words: int) -> Message:
    """An assistant reply without tool calls."""
    return {"role": "assistant", "content": tags.text(words)}


def tool_exchange(tags: Tags, output_words: list[int], *, text_words: int = 0) -> list[Message]:
    """An assistant message with ``len(output_words)`` parallel calls, then their results."""
    ids = [tags.call_id() for _ in output_words]
    names = ["read_file", "run_tests", "search_code"]
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": names[i % len(names)],
                "arguments": f'{{"path": "src/pkg/module_{i}.py"}}',
            },
        }
        for i, call_id in enumerate(ids)
    ]
    assistant: Message = {
        "role": "assistant",
        "content": tags.text(text_words) if text_words else None,
        "tool_calls": calls,
    }
    results = [
        {"role": "tool", "tool_call_id": call_id, "content": tags.text(words, lines=True)}
        for call_id, words in zip(ids, output_words, strict=True)
    ]
    return [assistant, *results]


def output_sizes(sizes: Sizes, fractions: list[int]) -> list[int]:
    """Word counts of parallel tool outputs whose sum stays within ``sizes.tool_unit``."""
    share = sizes.tool_unit // len(fractions) - 15  # tag and message overhead
    return [scale(f, share // 4, share) for f in fractions]


def instruction(tags: Tags, role: str, words: int) -> Message:
    """A mid-conversation system or developer message."""
    return {"role": role, "content": tags.text(words)}


def unit_boundaries(messages: list[Message]) -> list[int]:
    """Where a fork may cut: unit starts after the system prompt and task, and the end."""
    starts = [unit.start for unit in group_units(messages) if unit.start >= 2]
    return [*starts, len(messages)]


def last_user_index(messages: list[Message]) -> int:
    """Index of the latest user message (every conversation has its task)."""
    return max(i for i, m in enumerate(messages) if m.get("role") == "user")


def edited(tags: Tags, message: Message, words: int) -> Message:
    """``message`` (a user message) with its text replaced, any image kept."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p for p in content if p.get("type") != "text"]
        return {"role": "user", "content": [{"type": "text", "text": tags.text(words)}, *parts]}
    return {"role": "user", "content": tags.text(words)}


_COUNTER = PromptTokenCounter()


def provider_tokens(messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
    """Prompt tokens as the test upstream (our stand-in provider) counts them."""
    return _COUNTER.prompt({"messages": messages, "tools": tools})


def final_unit_over_window(messages: list[Message], window: int) -> bool:
    """Whether the conversation's final unit alone is larger than the window."""
    unit = group_units(messages)[-1]
    return sum(_COUNTER.message(messages[i]) for i in unit.indices) > window


def count_event(name: str) -> None:
    """Count ``name`` in Hypothesis's statistics; a no-op when a printed program is replayed
    by hand, outside Hypothesis."""
    if currently_in_test_context():
        event(name)


FRACTION = st.integers(0, 100)
"""How far between a kind of message's smallest and largest size (0..100)."""


class GrowingConversations(RuleBasedStateMachine):
    """The rules both state machines share: conversations start, grow and fork.

    Subclasses add an ``initialize`` rule that returns the first conversation into
    ``conversations`` and sets ``sizes``, and the rules that send (and check) a conversation.
    """

    conversations = Bundle("conversations")

    def __init__(self) -> None:
        super().__init__()
        self.tags = Tags(new_nonce())
        self.sizes = Sizes(0)
        self.count = 0

    def new_conversation(self, parent: Conversation | None = None, cut: int = 0) -> Conversation:
        """A new conversation, or a copy of ``parent``'s first ``cut`` messages."""
        self.count += 1
        if parent is None:
            return start(self.tags)
        return Conversation(
            messages=parent.messages[:cut],
            tenant=parent.tenant,
            mid_instructions=parent.mid_instructions,
        )

    @precondition(lambda self: self.count < MAX_CONVERSATIONS)
    @rule(target=conversations)
    def start_conversation(self) -> Conversation:
        return self.new_conversation()

    @rule(conversation=conversations, words=FRACTION)
    def user_says(self, conversation: Conversation, words: int) -> None:
        message = user_message(self.tags, scale(words, 3, self.sizes.user))
        conversation.messages.append(message)

    @rule(conversation=conversations, words=FRACTION)
    def user_sends_image(self, conversation: Conversation, words: int) -> None:
        message = image_message(self.tags, scale(words, 3, self.sizes.user))
        conversation.messages.append(message)

    @rule(
        conversation=conversations,
        role=st.sampled_from(["system", "developer"]),
        words=FRACTION,
    )
    def instruction_arrives(self, conversation: Conversation, role: str, words: int) -> None:
        if conversation.mid_instructions >= MAX_MID_INSTRUCTIONS:
            return
        conversation.mid_instructions += 1
        conversation.messages.append(instruction(self.tags, role, scale(words, 5, 30)))

    @precondition(lambda self: self.count < MAX_CONVERSATIONS)
    @rule(target=conversations, parent=conversations, cut=st.integers(0, 7), words=FRACTION)
    def fork(self, parent: Conversation, cut: int, words: int) -> Conversation:
        """A new conversation from a prefix of one (cut between units, ``cut`` units back from
        its end), then diverging with a new user message."""
        boundaries = unit_boundaries(parent.messages)
        child = self.new_conversation(parent, boundaries[-1 - cut % len(boundaries)])
        child.messages.append(user_message(self.tags, scale(words, 3, self.sizes.user)))
        return child

    def edit_latest_user_message(self, conversation: Conversation, words: int) -> None:
        """The latest user message rewritten, and what followed it dropped."""
        at = last_user_index(conversation.messages)
        replacement = edited(self.tags, conversation.messages[at], scale(words, 3, self.sizes.user))
        conversation.messages[at:] = [replacement]
