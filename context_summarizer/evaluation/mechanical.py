"""The baselines that need no model and no engine: ``truncate``, ``observation-masking`` and
``given``. Pure.

Each keeps the conversation valid: an assistant message with tool calls is never separated from
its tool results (``messages.group_units``), and the leading system/developer messages are never
touched.

- ``truncate`` drops the oldest units until the request fits, never the system prompt, the task
  (first user message), the latest user message or the final unit (where the agent is now).
- ``observation-masking`` is the baseline of "The Complexity Trap" (Lindenbauer et al., 2025):
  every tool output older than the last M assistant turns becomes a one-line placeholder
  (``prompts/<v>/masked_output.md``), with M the largest that fits the budget; when even M = 0
  does not fit, it then drops the oldest units like ``truncate`` and says so in its notes. The
  evaluator's ``masking`` is the engine's ``masking`` policy instead (``model_free``): what the
  proxy does, the ledger standing in where masking is not enough. The baseline keeps the
  published method in view beside it (the cache-replay benchmarks use its helpers too).
- ``given`` scores a summary written elsewhere: the leading instructions, the summary in the
  summary frame (no ledger), then the messages after those it ``covers``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.messages import Message, group_units, leading_instructions
from ..core.summary_request import summary_message
from ..core.tokens import TokenCounter
from ..loaders.prompts import load_prompt, render_prompt
from .compaction import (
    Compaction,
    CompactionInput,
    OneRowPerCase,
    finish,
    request_tokens,
)
from .dataset import Case

TOOL_ROLES = frozenset({"tool", "function"})


def protected_units(messages: Sequence[Mapping[str, Any]]) -> set[int]:
    """Indices of the units ``truncate`` never drops: leading instructions, the first and the
    last user message, and the final unit."""
    units = group_units(messages)
    protected: set[int] = set()
    for u, unit in enumerate(units):
        if unit.kind != "instruction":
            break
        protected.add(u)
    users = [u for u, unit in enumerate(units) if unit.kind == "user"]
    if users:
        protected.update((users[0], users[-1]))
    if units:
        protected.add(len(units) - 1)
    return protected


def drop_oldest_units(
    messages: Sequence[Message],
    *,
    budget_tokens: int,
    counter: TokenCounter,
    tools: Sequence[Mapping[str, Any]] | None,
) -> tuple[list[Message], int]:
    """``messages`` without their oldest droppable units, dropped one at a time until the request
    fits ``budget_tokens`` (or nothing droppable is left), and how many units went."""
    units = group_units(messages)
    protected = protected_units(messages)
    total = request_tokens(counter, messages, tools)
    dropped: set[int] = set()
    for u, unit in enumerate(units):
        if total <= budget_tokens:
            break
        if u in protected:
            continue
        dropped.add(u)
        total -= sum(counter.count_message(messages[i]) for i in unit.indices)
    kept = [messages[i] for u, unit in enumerate(units) if u not in dropped for i in unit.indices]
    return kept, len(dropped)


def largest_fitting(most: int, fits: Callable[[int], bool]) -> int | None:
    """The largest ``n`` in ``0..most`` with ``fits(n)``, or None when not even 0 fits.

    ``fits`` must hold up to some ``n`` and fail beyond it (found by bisection).
    """
    low, high = 0, most
    if not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def assistant_turns(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of the assistant messages, oldest first."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def mask_tool_outputs(
    messages: Sequence[Message],
    *,
    keep_turns: int,
    counter: TokenCounter,
    version: str,
) -> list[Message]:
    """``messages`` with every tool output older than the last ``keep_turns`` assistant turns
    replaced by the placeholder (only where that makes the message smaller); the other
    messages are the caller's own objects."""
    turns = assistant_turns(messages)
    if keep_turns <= 0:
        cutoff = len(messages)
    elif keep_turns > len(turns):
        cutoff = 0
    else:
        cutoff = turns[-keep_turns]
    out: list[Message] = []
    for index, message in enumerate(messages):
        if index < cutoff and message.get("role") in TOOL_ROLES:
            tokens = counter.count_message(message)
            masked = dict(message)
            masked["content"] = render_prompt("masked_output", version, original_tokens=tokens)
            if counter.count_message(masked) < tokens:
                out.append(masked)
                continue
        out.append(message)
    return out


class Truncate(OneRowPerCase):
    """``truncate``: drop the oldest units until the request fits."""

    name = "truncate"
    needs_model = False

    def compact_over_budget(self, job: CompactionInput) -> Compaction:
        """Drop the oldest droppable units of ``job.case`` until it fits."""
        kept, dropped = drop_oldest_units(
            job.case.messages,
            budget_tokens=job.budget_tokens,
            counter=job.counter,
            tools=job.tools,
        )
        return finish(job, kept, notes=[f"dropped_units={dropped}"])


class ObservationMasking(OneRowPerCase):
    """``observation-masking``: placeholders for tool outputs older than the last M turns, M the
    largest that fits; the oldest units dropped when even M = 0 does not fit."""

    name = "observation-masking"
    needs_model = False

    def compact_over_budget(self, job: CompactionInput) -> Compaction:
        """Mask with the largest M that fits; drop the oldest units when even M = 0 does not."""
        messages = job.case.messages
        version = job.prompt_version

        def masked(keep: int) -> list[Message]:
            return mask_tool_outputs(
                messages, keep_turns=keep, counter=job.counter, version=version
            )

        def fits(keep: int) -> bool:
            return request_tokens(job.counter, masked(keep), job.tools) <= job.budget_tokens

        # Tokens grow with M.
        keep = largest_fitting(len(assistant_turns(messages)), fits)
        if keep is None:
            kept, dropped = drop_oldest_units(
                masked(0), budget_tokens=job.budget_tokens, counter=job.counter, tools=job.tools
            )
            return finish(job, kept, notes=["keep_turns=0", f"dropped_units={dropped}"])
        return finish(job, masked(keep), notes=[f"keep_turns={keep}"])


class Given:
    """``given``: a summary from the dataset, one row per summary (its name is the variant)."""

    name = "given"
    needs_model = False
    case_requirement = "given summaries (a non-empty `summaries` list in the case)"
    """What a case must carry to get a row (``summarizer eval`` says so when one lacks it)."""

    def variants(self, case: Case) -> list[str | None]:
        """The names of the case's given summaries (none: no row)."""
        return list(dict.fromkeys(summary.name for summary in case.summaries))

    def compact(self, job: CompactionInput) -> Compaction:
        """Instructions, the given summary in the summary frame, then the uncovered messages."""
        given = next((s for s in job.case.summaries if s.name == job.variant), None)
        if given is None:
            raise ValueError(f"case {job.case.id!r} has no given summary named {job.variant!r}")
        messages = job.case.messages
        head = min(leading_instructions(messages), given.covers)
        inserted = summary_message(given.text, "", load_prompt("summary_frame", job.prompt_version))
        out = [*messages[:head], inserted, *messages[given.covers :]]
        return finish(job, out, summary=given.text)
