"""Training data ``summarizer export`` wrote (``--format sft|preference|reward``), read back as
evaluation cases: the round trip that lets the evaluator score what a trainer will learn from.

Each line becomes one case: its messages are the prompt's live prefix (the summary request
without its instruction), its gold facts the facts the line's reward counted
(``metadata.facts``), and each answer on the line a given summary covering the whole prefix
(``completion``, or ``chosen`` and ``rejected``). ``summarizer eval FILE -s given`` then scores
each answer's gold recall, which matches the share of facts its exported reward counted. Lines
written with ``--no-metadata`` have no facts to check and are not recognised as training data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.errors import ConversionError
from ...core.messages import message_text
from ...core.rewards import split_request
from ..dataset import Case, GivenSummary, GoldFact
from ..training_data import EXPORT_SOURCE
from .cases import _validated

TRAINING_FORMATS = frozenset({"sft", "preference", "reward"})


def is_training_line(value: Any) -> bool:
    """Whether a parsed JSONL line is an exported training line (by its metadata)."""
    if not isinstance(value, Mapping):
        return False
    metadata = value.get("metadata")
    return (
        isinstance(metadata, Mapping)
        and metadata.get("source") == EXPORT_SOURCE
        and metadata.get("format") in TRAINING_FORMATS
    )


def _answer(messages: Any) -> str:
    if isinstance(messages, Sequence) and messages and isinstance(messages[-1], Mapping):
        return message_text(messages[-1])
    raise ConversionError("an answer must be a list of one assistant message")


def _prompt_and_answers(line: Mapping[str, Any]) -> tuple[list[Any], dict[str, str]]:
    """The prompt's messages and the named answers of one line, in either style."""
    fmt = line["metadata"]["format"]
    if fmt == "preference":
        if "input" in line:
            prompt = line["input"].get("messages")
            chosen, rejected = line["preferred_output"], line["non_preferred_output"]
        else:
            prompt, chosen, rejected = line["prompt"], line["chosen"], line["rejected"]
        return list(prompt), {"chosen": _answer(chosen), "rejected": _answer(rejected)}
    if "messages" in line:  # sft, openai style: the answer is the last message
        messages = list(line["messages"])
        return messages[:-1], {"completion": _answer(messages[-1:])}
    return list(line["prompt"]), {"completion": _answer(line["completion"])}


def training_case(line: Mapping[str, Any], number: int, where: str) -> Case:
    """Line ``number`` of an exported training file as an evaluation case."""
    here = f"{where}:{number}"
    try:
        prompt, answers = _prompt_and_answers(line)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConversionError(f"{here}: not an exported training line ({exc})") from exc
    prefix, _ = split_request(prompt)
    if not prefix:
        raise ConversionError(f"{here}: the prompt has no conversation before its instruction")
    metadata = dict(line["metadata"])
    facts = [
        GoldFact(id=f"fact-{n}", text=str(fact["text"]), kind=str(fact.get("kind", "other")))
        for n, fact in enumerate(metadata.pop("facts", None) or line.get("facts") or [], 1)
        if isinstance(fact, Mapping) and fact.get("text")
    ]
    summaries = [
        GivenSummary(name=name, text=text, covers=len(prefix)) for name, text in answers.items()
    ]
    tools = line.get("tools") or (line.get("input") or {}).get("tools")
    return _validated(
        here,
        id=f"{metadata.get('id', 'export')}#{number}",
        messages=[dict(m) for m in prefix],
        tools=list(tools) if tools else None,
        model=metadata.get("model"),
        facts=facts,
        summaries=summaries,
        metadata={"source": EXPORT_SOURCE, "export": metadata},
    )


def read_training_lines(documents: Sequence[Any], where: str) -> list[Case]:
    """Every exported training line of a JSONL file as a case (other lines are an error)."""
    return [training_case(doc, n, where) for n, doc in enumerate(documents, 1)]
