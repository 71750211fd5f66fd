"""Summary quality as a reward: ``reward`` for one summary, ``SummaryReward`` for a trainer.

``reward(request, summary)`` scores a candidate summary of a conversation with the checks the
proxy's online gate runs before a summary may replace history (``core.rewards``): a number in
[0, 1] and its parts. ``request`` is the summary request's messages: the conversation, then the
instruction as the last (user) message, as ``summarizer export`` writes prompts and as the
engine sends them; ``with_instruction(conversation)`` appends the project's own instruction to
a bare conversation.

``SummaryReward(...)`` is the same score with the call shape of reward-function trainers (TRL's
``GRPOTrainer(reward_funcs=[...])``): a batch of prompts and completions in, one float each out.
It reads the ``facts`` and ``cap`` columns of an exported reward dataset when the trainer passes
them, and extracts the facts from the prompt otherwise (once per prompt: a trainer scores many
completions of each). Nothing here imports a trainer.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from .core.facts import Fact, ledger_facts
from .core.messages import message_text
from .core.rewards import (
    BREVITY_WEIGHT,
    Reward,
    prefix_facts,
    score_reward,
    split_request,
    summary_source,
)
from .core.tokens import TokenCounter
from .loaders.prompts import DEFAULT_VERSION, load_prompt
from .loaders.tokenizers import make_counter

__all__ = ["Reward", "SummaryReward", "reward", "with_instruction"]

DEFAULT_CAP = 2_000
"""The summary cap when none is given: ``CompactionConfig.max_summary_tokens``'s default."""
DEFAULT_LEDGER_TOKENS = 600
"""The ledger's bound when none is given: ``CompactionConfig.ledger_max_tokens``'s default."""
DEFAULT_TOKENIZER = "o200k_base"
"""The encoding that counts a summary's tokens when neither a model nor a tokenizer is named."""

Prompt = str | Sequence[Mapping[str, Any]]
"""A prompt as trainers pass it: a string, or chat messages."""


def with_instruction(
    conversation: Sequence[Mapping[str, Any]], *, prompt_version: str = DEFAULT_VERSION
) -> list[Mapping[str, Any]]:
    """``conversation`` followed by the project's summary instruction (``self_summary``): the
    summary request the engine would send for a first compaction of it."""
    instruction = load_prompt("self_summary", prompt_version)
    return [*conversation, {"role": "user", "content": instruction}]


def _counter(model: str | None, tokenizer: str | None) -> TokenCounter:
    if model is None and tokenizer is None:
        tokenizer = DEFAULT_TOKENIZER
    return make_counter(model or "", tokenizer=tokenizer)


def _messages(prompt: Prompt) -> list[Mapping[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return list(prompt)


def reward(
    request: Prompt,
    summary: str | None,
    *,
    facts: Sequence[Fact | Mapping[str, Any]] | None = None,
    cap: int = DEFAULT_CAP,
    model: str | None = None,
    tokenizer: str | None = None,
    finish_reason: str | None = None,
    ledger_tokens: int = DEFAULT_LEDGER_TOKENS,
    brevity_weight: float = BREVITY_WEIGHT,
) -> Reward:
    """Score ``summary`` as the summary asked for by ``request`` (the conversation, then the
    instruction as its last user message; a string is one user message and no instruction).

    ``facts``: the facts to name (a record's or an export's ``facts``); by default the ones the
    online gate would extract from the conversation (after its system messages and task, with
    the ledgers of earlier summaries folded in, bounded to ``ledger_tokens``). ``cap``: the
    summary's completion cap. ``model`` or ``tokenizer`` choose how tokens are counted
    (``o200k_base`` when neither is given). ``finish_reason``: the model's, when known
    (``length`` means cut off). Returns the reward in [0, 1] and its parts.
    """
    scorer = SummaryReward(
        cap=cap,
        model=model,
        tokenizer=tokenizer,
        ledger_tokens=ledger_tokens,
        brevity_weight=brevity_weight,
    )
    return scorer.score(request, summary, facts=facts, finish_reason=finish_reason)


def _facts(items: Sequence[Fact | Mapping[str, Any]]) -> list[Fact]:
    """Facts given as ``Fact`` objects or as records keep them (unknown kinds skipped)."""
    return [
        fact
        for item in items
        for fact in ([item] if isinstance(item, Fact) else ledger_facts([item]))
    ]


def completion_text(completion: str | Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> str:
    """The text of a completion as trainers pass it: a string, one message, or a list of
    messages (the last assistant message's text)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return message_text(completion)
    answers = [m for m in completion if m.get("role", "assistant") == "assistant"]
    return message_text(answers[-1]) if answers else ""


class SummaryReward:
    """A reward function for trainers: ``reward_fn(prompts, completions, **columns)`` returns
    one float per completion (``reward(...).reward``), as TRL's ``GRPOTrainer`` calls its
    ``reward_funcs``.

    Each prompt is a summary request (chat messages, the instruction last) or a string. The
    optional per-row columns a trainer passes through: ``facts`` (the facts to name, as an
    exported reward dataset has them) and ``cap`` (the summary's cap). Other columns are
    ignored. The facts extracted from a prompt are kept for the next completions of the same
    prompt (the ``cache_size`` most recent prompts).
    """

    __name__ = "summary_reward"

    def __init__(
        self,
        *,
        cap: int = DEFAULT_CAP,
        model: str | None = None,
        tokenizer: str | None = None,
        ledger_tokens: int = DEFAULT_LEDGER_TOKENS,
        brevity_weight: float = BREVITY_WEIGHT,
        cache_size: int = 256,
    ) -> None:
        self.cap = cap
        self.ledger_tokens = ledger_tokens
        self.brevity_weight = brevity_weight
        self.counter = _counter(model, tokenizer)
        self._facts: OrderedDict[str, list[Fact]] = OrderedDict()
        self._cache_size = cache_size
        self.last: list[Reward] = []
        """The rewards of the last batch, with their parts (for logging)."""

    def __call__(
        self,
        prompts: Sequence[Prompt],
        completions: Sequence[str | Sequence[Mapping[str, Any]]],
        **columns: Any,
    ) -> list[float]:
        """One reward per completion."""
        if len(prompts) != len(completions):
            raise ValueError(
                f"{len(prompts)} prompts but {len(completions)} completions: one each expected"
            )
        facts_column = _column(columns.get("facts"), len(prompts), "facts")
        cap_column = _column(columns.get("cap"), len(prompts), "cap")
        self.last = [
            self.score(
                prompt,
                completion_text(completion),
                facts=facts_column[i] if facts_column is not None else None,
                cap=cap_column[i] if cap_column is not None else None,
            )
            for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
        ]
        return [r.reward for r in self.last]

    def score(
        self,
        prompt: Prompt,
        summary: str | None,
        *,
        facts: Sequence[Fact | Mapping[str, Any]] | None = None,
        cap: int | None = None,
        finish_reason: str | None = None,
    ) -> Reward:
        """The reward of one completion, with its parts (``reward``'s arguments)."""
        messages = _messages(prompt)
        prefix, instruction = (
            (messages, None) if isinstance(prompt, str) else split_request(messages)
        )
        chosen = _facts(facts) if facts is not None else self._prompt_facts(prefix)
        return score_reward(
            summary,
            facts=chosen,
            source=summary_source(prefix, instruction or ""),
            counter=self.counter,
            cap=int(cap) if cap else self.cap,
            finish_reason=finish_reason,
            brevity_weight=self.brevity_weight,
        )

    def _prompt_facts(self, prefix: Sequence[Mapping[str, Any]]) -> list[Fact]:
        key = hashlib.sha256(
            json.dumps(list(prefix), sort_keys=True, default=str).encode()
        ).hexdigest()
        found = self._facts.get(key)
        if found is None:
            found = prefix_facts(
                prefix, ledger_tokens=self.ledger_tokens, count_tokens=self.counter.count_text
            )
            self._facts[key] = found
            if len(self._facts) > self._cache_size:
                self._facts.popitem(last=False)
        else:
            self._facts.move_to_end(key)
        return found


def _column(values: Any, rows: int, name: str) -> list[Any] | None:
    """A per-row column a trainer passed, checked for length (None: not passed)."""
    if values is None:
        return None
    if not isinstance(values, Sequence) or isinstance(values, str) or len(values) != rows:
        raise ValueError(f"column {name!r} must hold one value per completion ({rows})")
    return list(values)
