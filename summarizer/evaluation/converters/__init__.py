"""Turn other tools' agent trajectories into evaluation cases (``evaluation.dataset.Case``).

Two sources:

- **SWE-agent** ``.traj`` files: ``history`` (preferred) or ``trajectory`` steps become the
  messages; gold facts are what the run itself recorded: the files its final patch changed, the
  failing tests and error lines seen in observations, and an obvious reproduce command.
- **Chat logs**: a JSON list of message lists, a single message list, records with ``messages``
  or ``traj`` (tau-bench), or JSONL of any of those. tau-bench records also give identifier facts
  from the task's ground-truth actions, kept when the conversation mentions them.

Messages are rebuilt, never passed through: only the keys OpenAI's Chat Completions accepts for
each role are kept (``agent``, ``thought``, ``action``, ``message_type``, ... are dropped),
demonstration messages (``is_demo``) are dropped, and a tool result that answers no preceding
call becomes a user message, while a call no result answers is removed, so every converted case
passes ``validate_messages`` and pairs each ``tool_calls`` id with its result. The ``convert_*``
functions are pure; ``read_*`` add file reading, and every failure is a ``ConversionError`` whose
message starts with the file name.
"""

from __future__ import annotations

from .chat import action_identifiers, convert_chat
from .files import read_chat, read_swe_agent
from .messages import openai_messages
from .swe_agent import convert_swe_agent, error_lines, failing_tests, patch_files

__all__ = [
    "action_identifiers",
    "convert_chat",
    "convert_swe_agent",
    "error_lines",
    "failing_tests",
    "openai_messages",
    "patch_files",
    "read_chat",
    "read_swe_agent",
]
