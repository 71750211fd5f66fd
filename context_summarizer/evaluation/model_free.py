"""The strategies that run the engine's model-free policies: ``masking`` and ``ledger-only``.

Each is production's compaction under that policy (``CompactionConfig.policy``), forced once
to the evaluation's budget through ``engine_strategies.run_engine``, so what the evaluator
scores is exactly what the proxy and the library would send:

- ``masking``: old tool outputs (outside the newest ``mask_keep_turns`` turns, the final turn
  and pinned turns) become the placeholder of ``prompts/<v>/masked_output.md``, oldest first,
  until the request is under the budget; where masking every such output is not enough, the
  runs planned on the masked view become their fact ledger, as ``ledger-only`` makes it.
- ``ledger-only``: planned as ``self-summary``; each run becomes the note of
  ``prompts/<v>/ledger_summary.md`` and its fact ledger, in ``mechanical_frame.md``.

Neither asks a model: the engine is given a summary client that fails the row if it is ever
called.
"""

from __future__ import annotations

from ..core.results import Policy, SummarizeCall, SummaryOutcome
from .compaction import Compaction, CompactionInput, OneRowPerCase, finish
from .engine_strategies import DEFAULT_LEDGER_TOKENS, engine_config, run_engine


class ModelCalled(RuntimeError):
    """A model-free policy asked for a summary: a bug in the engine, never a row's result."""


def _never_called(call: SummarizeCall) -> SummaryOutcome:
    raise ModelCalled("a model-free policy asked the model for a summary")


class ModelFree(OneRowPerCase):
    """``masking`` / ``ledger-only``: the engine under that policy, no model asked."""

    needs_model = False

    def __init__(self, policy: Policy) -> None:
        self.policy: Policy = policy
        self.name: str = policy

    def compact_over_budget(self, job: CompactionInput) -> Compaction:
        """One forced compaction of ``job.case`` by the engine under this policy."""
        config = engine_config(
            job,
            ledger_max_tokens=DEFAULT_LEDGER_TOKENS,
            max_summary_tokens=job.max_summary_tokens,
            policy=self.policy,
        )
        result, _ = run_engine(job, config, _never_called)
        event = result.event
        notes = list(event.degraded) if event is not None else []
        if event is not None and event.masked:
            notes.append(f"masked={event.masked}")
        if event is not None and event.ledger_only:
            notes.append(f"ledger_only={event.ledger_only}")
        return finish(job, list(result.messages), notes=notes)
