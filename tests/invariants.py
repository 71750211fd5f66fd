"""The contract every request summarizer sends upstream keeps (issue 11, "Tests that stay").

``raw`` is the conversation an agent sent (its full history) and ``sent`` the messages that went
upstream for it. Each rule is one function that raises ``AssertionError`` naming the rule (in
square brackets) and the offending indices; ``check_request`` runs the structural ones together.

Every message of ``sent`` is one of:

- *verbatim*: equal to the raw message it maps to;
- *replaced*: a raw ``tool`` message whose content summarizer cut to its head and tail (same role,
  ``tool_call_id`` and other fields; the content carries the marker of
  ``prompts/v2/truncated_output.md``, with only a head and a tail of the
  original around it), or masked by the ``hybrid`` or ``masking`` policy (same fields; the
  content is exactly the placeholder of ``prompts/v2/masked_output.md``);
- *summary*: a ``user`` message summarizer inserted (``[Context summary]``: a model's summary in
  ``summary_frame.md``, or a note no model wrote and the fact ledger in ``mechanical_frame.md``,
  the ``masking`` and ``ledger-only`` policies' and the fallback's; or the mechanical fallback of
  ``prompts/v2/fallback_summary.md``).

Verbatim and replaced messages map to strictly increasing raw indices; each run of raw messages
missing between two of them (or before the first, or after the last) is stood in for by at least
one summary placed in that run's place, and no summary stands where nothing is missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from context_summarizer.core.errors import InvalidConversation
from context_summarizer.core.messages import (
    INSTRUCTION_ROLES,
    content_text,
    group_units,
    leading_instructions,
    message_digest,
    tool_call_ids,
    validate_messages,
)
from context_summarizer.loaders.prompts import load_prompt

Message = Mapping[str, Any]

VALID = "valid conversation"
BELONGS = "belongs to this conversation"
ORDER = "raw order"
GAPS = "gaps stood in for by summaries"
INSTRUCTIONS = "instructions kept"
LATEST_USER = "latest user message kept"
FINAL_UNIT = "final unit kept"
FITS = "fits the window"
FRESH = "same as a fresh process"
TENANCY = "tenancy"

SUMMARY_PREFIXES = ("[Context summary]", load_prompt("fallback_summary").split("{", 1)[0])
"""How a summary message summarizer inserts begins (framed, or the mechanical fallback)."""


def _marker(name: str) -> re.Pattern[str]:
    """A prompt's text as a pattern, each ``{placeholder}`` standing for a number."""
    escaped = re.escape(load_prompt(name))
    return re.compile(re.sub(r"\\\{\w+\\\}", r"\\d+", escaped))


REPLACEMENT_MARKERS = (_marker("truncated_output"),)
"""What summarizer writes into a tool output it cuts to fit."""
MASKED_OUTPUT = _marker("masked_output")
"""What the ``hybrid`` and ``masking`` policies write in place of an old tool output (the whole
content)."""


def fail(rule: str, detail: str) -> AssertionError:
    """The error for a broken rule: ``[rule] detail``."""
    return AssertionError(f"[{rule}] {detail}")


def describe(message: Message) -> str:
    """A short, readable form of a message for failure reports."""
    text = " ".join(content_text(message).split())
    if len(text) > 70:
        text = text[:67] + "..."
    extra = ""
    if message.get("tool_calls"):
        extra = f" calls {tool_call_ids(message)}"
    if message.get("role") == "tool":
        extra = f" answers {message.get('tool_call_id')!r}"
    return f"{message.get('role')}{extra} {text!r}"


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary summarizer inserted."""
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and content.startswith(SUMMARY_PREFIXES)
    )


def is_replacement_of(message: Message, original: Message) -> bool:
    """Whether ``message`` is ``original`` (a tool output) cut to fit, or masked, by
    summarizer."""
    if original.get("role") != "tool" or message.get("role") != "tool":
        return False
    if {k: v for k, v in message.items() if k != "content"} != {
        k: v for k, v in original.items() if k != "content"
    }:
        return False
    content, before = message.get("content"), content_text(original)
    if not isinstance(content, str):
        return False
    if MASKED_OUTPUT.fullmatch(content):
        return True
    for marker in REPLACEMENT_MARKERS:
        found = marker.search(content)
        if found is not None:
            head, tail = content[: found.start()], content[found.end() :]
            return before.startswith(head) and before.endswith(tail)
    return False


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one message of ``sent`` comes from."""

    position: int
    """Index in ``sent``."""
    kind: Literal["verbatim", "replaced", "summary"]
    raw_index: int | None
    """Index in ``raw`` (None for a summary)."""


def check_valid_conversation(sent: Sequence[Message]) -> None:
    """``sent`` is a conversation an OpenAI-compatible upstream accepts.

    It passes ``validate_messages``; each assistant message with ``tool_calls`` is followed
    immediately by exactly one ``tool`` message per call id (any order, nothing in between); and
    every ``tool`` message answers a call of the assistant message right before its group.
    """
    try:
        validate_messages(list(sent))
    except InvalidConversation as error:
        raise fail(VALID, f"validate_messages refused it: {error}") from None
    i = 0
    while i < len(sent):
        message = sent[i]
        if message.get("role") == "assistant" and message.get("tool_calls"):
            ids = tool_call_ids(message)
            if len(set(ids)) != len(ids):
                raise fail(VALID, f"sent[{i}] repeats a tool call id: {ids}")
            answered: list[str] = []
            j = i + 1
            while j < len(sent) and len(answered) < len(ids) and sent[j].get("role") == "tool":
                answer = sent[j].get("tool_call_id")
                if answer not in ids or answer in answered:
                    raise fail(
                        VALID,
                        f"sent[{j}] answers {answer!r}, which the assistant at sent[{i}] "
                        f"(calls {ids}) did not call or was already answered",
                    )
                answered.append(answer)
                j += 1
            if len(answered) < len(ids):
                missing = [c for c in ids if c not in answered]
                after = describe(sent[j]) if j < len(sent) else "the end of the conversation"
                raise fail(
                    VALID,
                    f"the tool pair of sent[{i}] is split: calls {missing} have no result "
                    f"right after it (sent[{j}] is {after})",
                )
            i = j
            continue
        if message.get("role") == "tool":
            raise fail(
                VALID,
                f"sent[{i}] is a tool message answering {message.get('tool_call_id')!r} with no "
                "assistant call right before its group",
            )
        i += 1


def place_messages(
    raw: Sequence[Message],
    sent: Sequence[Message],
    *,
    summary: Callable[[Message], bool] = is_summary,
    replacement: Callable[[Message, Message], bool] = is_replacement_of,
) -> list[Placed]:
    """Map each message of ``sent`` to the raw message it is, in raw order.

    Rules: *belongs to this conversation* (each is verbatim, a replaced tool output, or a
    summary) and *raw order* (the raw indices of the kept ones strictly increase). Verbatim
    means equal to the raw message at that index of *this* conversation, so a message of a
    forked sibling or of another tenant does not belong. ``summary`` and ``replacement`` say
    what a summary and a replaced output are (another API's: Gemini's contents).
    """
    candidates: list[tuple[int, Literal["verbatim", "replaced", "summary"], list[int]]] = []
    for k, message in enumerate(sent):
        same = [j for j, original in enumerate(raw) if original == message]
        if same:
            candidates.append((k, "verbatim", same))
            continue
        replaced = [j for j, original in enumerate(raw) if replacement(message, original)]
        if replaced:
            candidates.append((k, "replaced", replaced))
            continue
        if summary(message):
            candidates.append((k, "summary", []))
            continue
        raise fail(
            BELONGS,
            f"sent[{k}] ({describe(message)}) is no message of this conversation, no tool "
            "output of it cut to fit, and no summary",
        )
    placed: list[Placed] = []
    last, last_position = -1, -1
    for k, kind, indices in candidates:
        if kind == "summary":
            placed.append(Placed(k, kind, None))
            continue
        later = [j for j in indices if j > last]
        if not later:
            raise fail(
                ORDER,
                f"sent[{k}] is raw[{indices[0]}] ({describe(raw[indices[0]])}) but comes after "
                f"sent[{last_position}], which is raw[{last}]",
            )
        last, last_position = later[0], k
        placed.append(Placed(k, kind, last))
    return placed


def check_gaps_summarized(raw: Sequence[Message], placed: Sequence[Placed]) -> None:
    """Each run of raw messages left out has a summary in its place, and only such runs do.

    A run is the raw messages between two consecutive kept messages (or before the first kept
    one, or after the last). Its summary must sit between those two kept messages in ``sent``.
    """
    kept = [p for p in placed if p.raw_index is not None]
    bounds = [-1, *(p.raw_index for p in kept if p.raw_index is not None), len(raw)]
    positions = [-1, *(p.position for p in kept), len(placed)]
    for n in range(len(bounds) - 1):
        low, high = bounds[n], bounds[n + 1]
        summaries = [
            p.position
            for p in placed
            if p.kind == "summary" and positions[n] < p.position < positions[n + 1]
        ]
        where = _between(positions[n], positions[n + 1], len(placed))
        if high - low > 1 and not summaries:
            raise fail(
                GAPS,
                f"raw[{low + 1}:{high}] ({high - low - 1} messages) left out with no summary "
                f"in its place ({where})",
            )
        if high - low == 1 and summaries:
            raise fail(
                GAPS,
                f"summary at sent{summaries} stands in for nothing: nothing of raw is missing "
                f"there ({where})",
            )


def _between(before: int, after: int, length: int) -> str:
    if before < 0 and after >= length:
        return "nothing of raw was kept"
    if before < 0:
        return f"before sent[{after}]"
    if after >= length:
        return f"after sent[{before}]"
    return f"between sent[{before}] and sent[{after}]"


def _verbatim(placed: Sequence[Placed]) -> set[int]:
    return {p.raw_index for p in placed if p.kind == "verbatim" and p.raw_index is not None}


def check_instructions_kept(raw: Sequence[Message], placed: Sequence[Placed]) -> None:
    """Every system/developer message of ``raw``, leading or not, is sent verbatim; of a
    mid-conversation one that recurs word for word, the newest copy is."""
    verbatim = _verbatim(placed)
    for j, message in enumerate(raw):
        if message.get("role") in INSTRUCTION_ROLES and j not in verbatim:
            digest = message_digest(message)
            later = [k for k in range(j + 1, len(raw)) if message_digest(raw[k]) == digest]
            if j >= leading_instructions(raw) and later and later[-1] in verbatim:
                continue
            raise fail(INSTRUCTIONS, f"raw[{j}] ({describe(message)}) was not sent verbatim")


def check_latest_user_kept(raw: Sequence[Message], placed: Sequence[Placed]) -> None:
    """The latest user message of ``raw`` is sent verbatim."""
    users = [j for j, message in enumerate(raw) if message.get("role") == "user"]
    if users and users[-1] not in _verbatim(placed):
        j = users[-1]
        raise fail(LATEST_USER, f"raw[{j}] ({describe(raw[j])}) was not sent verbatim")


def check_final_unit_kept(
    raw: Sequence[Message], placed: Sequence[Placed], *, unit_over_window: bool = False
) -> None:
    """The final unit of ``raw`` (its last message, with its tool call and results) is sent
    verbatim; only when that unit alone is larger than the window may its tool outputs be
    cut to fit."""
    units = group_units(raw)
    if not units:
        return
    unit = units[-1]
    allowed = {"verbatim", "replaced"} if unit_over_window else {"verbatim"}
    kinds = {p.raw_index: p.kind for p in placed if p.raw_index is not None}
    for j in unit.indices:
        if kinds.get(j) not in allowed:
            state = "replaced" if kinds.get(j) == "replaced" else "missing"
            raise fail(
                FINAL_UNIT,
                f"raw[{j}] ({describe(raw[j])}) of the final unit raw[{unit.start}:{unit.end}] "
                f"was {state}, not sent verbatim",
            )


def check_summaries_mention_this_conversation(
    raw: Sequence[Message], sent: Sequence[Message], pattern: re.Pattern[str]
) -> None:
    """Rule *belongs to this conversation*, for summaries: every message tag (``pattern``) a
    summary in ``sent`` mentions is the tag of a message of ``raw``.

    The generators tag every message uniquely, so a summary mentioning another tag carries
    something of a forked sibling's turns (or another conversation's) into this one.
    """
    known = {tag for message in raw for tag in pattern.findall(content_text(message))}
    for k, message in enumerate(sent):
        if is_summary(message):
            foreign = sorted(set(pattern.findall(content_text(message))) - known)
            if foreign:
                raise fail(
                    BELONGS,
                    f"the summary at sent[{k}] mentions messages {foreign}, which are not in "
                    "this conversation (a forked sibling's or another conversation's turns)",
                )


def check_request(
    raw: Sequence[Message],
    sent: Sequence[Message],
    *,
    unit_over_window: bool = False,
    tag_pattern: re.Pattern[str] | None = None,
) -> list[Placed]:
    """Every structural rule on one request; returns where each sent message came from."""
    check_valid_conversation(sent)
    placed = place_messages(raw, sent)
    if tag_pattern is not None:
        check_summaries_mention_this_conversation(raw, sent, tag_pattern)
    check_gaps_summarized(raw, placed)
    check_instructions_kept(raw, placed)
    check_latest_user_kept(raw, placed)
    check_final_unit_kept(raw, placed, unit_over_window=unit_over_window)
    return placed


def check_fits(estimated_tokens: int, *, context_window: int, reserve_output_tokens: int) -> None:
    """The request's estimate leaves the reply's reserve free in the window."""
    usable = context_window - reserve_output_tokens
    if estimated_tokens > usable:
        raise fail(
            FITS,
            f"estimated {estimated_tokens} prompt tokens, over the usable window of {usable} "
            f"({context_window} minus a reply reserve of {reserve_output_tokens})",
        )


def check_same_as_fresh(
    sent: Sequence[Message],
    fresh: Sequence[Message] | None,
    *,
    estimates: Sequence[int],
    trigger_tokens: int,
) -> None:
    """A new process over the same store sends the same messages for the same raw conversation.

    ``fresh`` is what its ``unchanged()`` returned: None (a compaction is due) is allowed only
    when the original request was over the trigger by one of ``estimates`` (its calibrated
    estimate, and the uncalibrated one a process without calibration would make).
    """
    if fresh is None:
        over = [e for e in estimates if e > trigger_tokens]
        if not over:
            raise fail(
                FRESH,
                f"a fresh process would compact again, though the request was under the "
                f"trigger ({trigger_tokens} tokens) by every estimate ({list(estimates)})",
            )
        return
    if list(fresh) != list(sent):
        first = next(
            (i for i, (a, b) in enumerate(zip(fresh, sent, strict=False)) if a != b),
            min(len(fresh), len(sent)),
        )
        sent_at = describe(sent[first]) if first < len(sent) else "nothing"
        fresh_at = describe(fresh[first]) if first < len(fresh) else "nothing"
        raise fail(
            FRESH,
            f"a fresh process over the same store sends {len(fresh)} messages, this one sent "
            f"{len(sent)}; first difference at [{first}]: sent {sent_at}, fresh {fresh_at}",
        )


def check_summaries_exclude(sent: Sequence[Message], forbidden: Iterable[str]) -> None:
    """Rule *tenancy*: no summary in ``sent`` contains any of ``forbidden`` (marks that only
    another tenant's summaries carry)."""
    marks = list(forbidden)
    for k, message in enumerate(sent):
        if is_summary(message):
            text = content_text(message)
            found = [mark for mark in marks if mark in text]
            if found:
                raise fail(
                    TENANCY,
                    f"the summary at sent[{k}] was written for another tenant ({found[0]!r})",
                )
