"""What compaction saved one request: the prompt tokens it did not send.

A request on a compacted conversation sends its checkpoint's rewrite instead of the conversation
the client sent. What that saved is the conversation as sent by the client (its messages, tools
and reply priming, counted as the engine counts them) minus what went upstream
(``TokenReport.raw_estimated_tokens``), scaled by the request's calibration as its own figure
is (``estimated_tokens``: ``x-summarizer-prompt-tokens``, the activity log's ``tokens_sent``).
Every request standing on a checkpoint saves again what it replaced, not only the one that made
it. The recall tool's definition, which the proxy adds to a compacted conversation's requests,
is part of what was sent: it counts against the saving.

Counting a whole conversation costs a cached count per message (about 1 ms for 1,000), so the
messages' saving is counted once per checkpoint (and process): a checkpoint applies only to
conversations that begin with the ``basis_count`` messages it was made from, rewrites nothing
after them, and so saves the same on every one of them.
"""

from __future__ import annotations

from collections import OrderedDict

from ..core.located import Located
from ..core.results import PrepareResult

MEMO_SIZE = 4096
"""Checkpoints whose saving is remembered (the least recently used are forgotten first)."""


class SavedTokens:
    """``of(located, result)``: the prompt tokens ``result`` did not send, by a memo per
    checkpoint and tokenizer. Used on the event loop only."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self.size = size
        self._messages: OrderedDict[tuple[str, str], int] = OrderedDict()
        """(checkpoint id, tokenizer) -> the messages' saving, uncalibrated."""

    def of(self, located: Located, result: PrepareResult) -> int:
        """What ``result`` (the settled request of ``located``) did not send because of
        compaction, calibrated; 0 when no checkpoint rewrote it."""
        report = result.report
        if not result.rewritten or result.checkpoint_id is None or report.raw_estimated_tokens <= 0:
            return 0
        offered = located.recall_tokens if result.replaced else 0
        key = (result.checkpoint_id, located.counter.name)
        messages = self._messages.get(key)
        if messages is None:
            _, whole = located.view_under(None)  # the conversation as the client sent it
            messages = whole - report.raw_estimated_tokens + offered
            self._messages[key] = messages
            while len(self._messages) > self.size:
                self._messages.popitem(last=False)
        else:
            self._messages.move_to_end(key)
        saved = messages - offered
        if saved <= 0:
            return 0
        return round(saved * report.estimated_tokens / report.raw_estimated_tokens)
