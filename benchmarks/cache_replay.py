"""Replaying a recorded agent session under a compaction strategy: the requests it would send.

A *session* is a complete message list (system prompt, task, then assistant turns with their tool
results). It is replayed as the agent lived it: at each assistant message ``i`` the agent sends a
request whose context is what the strategy keeps of ``messages[:i]``, and message ``i`` is the
model's reply (its tokens are the request's output tokens). A strategy's replay is the list of
every request it sends, agent requests and summary requests alike, in order; pricing them is
``benchmarks.cache_accounting``'s job. Everything here is deterministic and offline.

Strategies (all compact at the same trigger to the same target, the project's
``CompactionConfig`` defaults over the replay window):

- ``self-summary``: production's engine (``ContextEngine``: locate, planner, summary request,
  checkpoint, rewritten view), with a stand-in model whose summary is a fixed ``S`` tokens.
- ``from-scratch``: the same engine run, so the same cut, kept tail and compacted context, but
  each compaction's summary request is the evaluator's LangChain-style one
  (``engine_strategies.from_scratch_request``) over the span the engine replaced, with the same
  ``S`` output tokens. The two replays differ only in their summary requests.
- ``masking (M=10, rolling)``: observation masking as in "The Complexity Trap" (Lindenbauer et al.,
  2025), re-applied every turn: tool outputs older than the last 10 assistant turns become the
  placeholder of ``prompts/<v>/masked_output.md`` (``mechanical.mask_tool_outputs``). Where that
  still exceeds the trigger, fewer turns keep their outputs (the largest M that fits); where even
  M = 0 does not fit, the oldest units are dropped down to the target, for good.
- ``masking (stepped)``: masking as a compaction: nothing changes until the trigger, then in one
  step the outputs older than the last M turns are masked, M the largest that lands under the
  target (the rule the evaluator's ``masking`` followed before it became the engine's
  ``masking`` policy), then the oldest units are dropped if M = 0 is not enough; append-only
  until the next trigger.
- ``no compaction``: every request is the raw ``messages[:i]``.

Each request also records where an Anthropic-style client puts its explicit cache breakpoints:
at the end of every agent request and right after the summary message of a compacted context; at
the end of a self-summary request (it must carry one to read the cached conversation); none on a
from-scratch summary request (nothing will ever read its prompt back, so a breakpoint would only
turn its input into 1.25x cache writes).

This module holds ``no compaction`` and ``replay_all``; what every replay shares is
``benchmarks.cache_replay_session``, the engine's two replays ``benchmarks.cache_replay_engine``,
masking's two ``benchmarks.cache_replay_masking``.
"""

from __future__ import annotations

from .cache_replay_engine import replay_engine
from .cache_replay_masking import replay_masking_rolling, replay_masking_stepped
from .cache_replay_session import (
    NO_COMPACTION,
    Replay,
    SentRequest,
    Session,
    output_tokens,
    replay_counter,
    reply_indices,
)


def replay_raw(session: Session) -> Replay:
    """``no compaction``: every request is the whole history so far."""
    counter = replay_counter()
    replay = Replay(NO_COMPACTION)
    for i in reply_indices(session.messages):
        replay.requests.append(
            SentRequest(
                "agent",
                session.messages[:i],
                session.tools,
                output_tokens(counter, session.messages[i]),
                (i,),
            )
        )
    return replay


def replay_all(session: Session, *, window: int) -> dict[str, Replay]:
    """Every strategy's replay of ``session`` in a ``window``-token window, by strategy name."""
    own, scratch = replay_engine(session, window=window)
    replays = [
        own,
        scratch,
        replay_masking_rolling(session, window=window),
        replay_masking_stepped(session, window=window),
        replay_raw(session),
    ]
    return {replay.strategy: replay for replay in replays}
