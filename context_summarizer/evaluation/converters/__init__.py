"""Turn other tools' agent trajectories into evaluation cases (``evaluation.dataset.Case``).

Four sources:

- **SWE-agent** ``.traj`` files: ``history`` (preferred) or ``trajectory`` steps become the
  messages; gold facts are what the run itself recorded (``evidence``): the files and the
  definitions its final patch changed, the failing tests and error lines seen in observations,
  and the commands that reproduce the bug and run the tests.
- **Chat logs**: a JSON list of message lists, a single message list, records with ``messages``
  or ``traj`` (tau-bench), or JSONL of any of those. tau-bench records also give identifier facts
  from the task's ground-truth actions, kept when the conversation mentions them.
- **mini-swe-agent** ``.traj.json`` files: ``messages`` as they were sent (observations stay
  user turns); gold facts from the final patch, the failing tests, error lines and commands
  (``mini_swe_agent``).
- **Claude Code** session transcripts (``.jsonl``): the conversation before its first
  compaction, in Chat Completions form; the summary Claude Code wrote becomes the case's
  ``given`` summary; gold facts are the files it edited, the commands that failed and their
  errors, the test, build and lint commands it ran, and what the user typed after the task
  (``claude_code``).

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
from .claude_code import convert_claude_code
from .evidence import (
    check_commands,
    error_lines,
    failing_tests,
    key_commands,
    patch_files,
    patch_identifiers,
)
from .files import read_chat, read_claude_code, read_mini_swe_agent, read_swe_agent
from .messages import openai_messages
from .mini_swe_agent import convert_mini_swe_agent
from .swe_agent import convert_swe_agent

__all__ = [
    "action_identifiers",
    "check_commands",
    "convert_chat",
    "convert_claude_code",
    "convert_mini_swe_agent",
    "convert_swe_agent",
    "error_lines",
    "failing_tests",
    "key_commands",
    "openai_messages",
    "patch_files",
    "patch_identifiers",
    "read_chat",
    "read_claude_code",
    "read_mini_swe_agent",
    "read_swe_agent",
]
