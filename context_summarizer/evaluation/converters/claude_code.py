"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``): one record a
line, the conversation in Anthropic's message format.

The case is the conversation **before the first automatic compaction** (the ``system`` record
with ``subtype: compact_boundary``), converted to Chat Completions (``anthropic``). The summary
Claude Code wrote there (the user message marked ``isCompactSummary``, verbatim) becomes the
case's ``given`` summary, covering every converted message: Claude Code replaced them all with
it. A session that never compacted converts whole, with no given summary. Records that never
reach the model are skipped: progress, file snapshots, queue operations, system notes, sidechain
(sub-agent) records and ``isVisibleInTranscriptOnly`` ones.

Gold facts, from the transcript's own structure rather than from text rules:

- ``path``: every file an ``Edit``, ``MultiEdit``, ``Write`` or ``NotebookEdit`` call changed
  (its result not an error), relative to the session's working directory (the absolute path is
  an alias);
- ``command``: every ``Bash`` command whose result was an error (first line), the user's refusals
  of a tool call aside, and every command it ran that tests, builds or lints
  (``evidence.check_commands``: ``mix test``, ``pytest``, ``cargo build``, ...), however it ended;
- ``error``: in each failed result, the first line that reads as an error (``Exit code N``
  skipped);
- ``constraint``: what the user typed after the opening request (the opening one is the task,
  which every strategy keeps), bounded to 200 characters: notifications, interruptions and
  command echoes Claude Code writes in the user's name are not the user's words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import ConversionError
from ..dataset import Case, GivenSummary, GoldFact, Probe
from .anthropic import AnthropicBuilder, block_text
from .cases import _unique, _validated
from .evidence import check_commands, plain_command
from .messages import openai_messages

EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
"""Claude Code's tools that change a file (``file_path``, or ``notebook_path``)."""

_MAX_FACT = 200
_EXIT_CODE = re.compile(r"Exit code \d+")
_ERROR_WORDS = re.compile(
    r"(?i)\b(?:error|fatal|failed|failure|exception|panic|panicked|not found|cannot|can't)\b"
    r"|\*\* \("
)
_REFUSAL = "The user doesn't want to proceed with this tool use"
_NOT_TYPED = ("<", "[Request interrupted", "Caveat:")


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_FACT else text[:_MAX_FACT].rstrip()


def failure_line(output: str) -> str | None:
    """The first line of a failed tool result that reads as an error, or None."""
    for line in output.replace("\r\n", "\n").split("\n"):
        line = line.strip().strip("│").strip()
        if line and not _EXIT_CODE.fullmatch(line) and _ERROR_WORDS.search(line[:500]):
            return _bounded(line)
    return None


def _relative(path: str, cwd: str | None) -> str:
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path


class _Facts:
    """The gold facts gathered while the records are read."""

    def __init__(self, cwd: str | None) -> None:
        self.cwd = cwd
        self.calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
        self.paths: list[tuple[str, str]] = []
        self.commands: list[str] = []
        self.ran: list[str] = []
        self.errors: list[str] = []
        self.typed: list[str] = []

    def user_words(self, content: Any) -> None:
        """Keep what the user typed (a text message, not tool results or Claude Code's notes)."""
        if isinstance(content, list):
            if any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content):
                return
            content = block_text(content)
        if isinstance(content, str) and content.strip():
            text = content.strip()
            if not text.startswith(_NOT_TYPED):
                self.typed.append(_bounded(text))

    def tool_uses(self, content: Any) -> None:
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, Mapping) or block.get("type") != "tool_use":
                continue
            name, arguments = str(block.get("name")), block.get("input")
            arguments = arguments if isinstance(arguments, Mapping) else {}
            self.calls[str(block.get("id"))] = (name, arguments)
            command = arguments.get("command")
            if name == "Bash" and isinstance(command, str):
                self.ran += check_commands(command.splitlines()[:1])

    def results(self, results: Iterable[Mapping[str, Any]]) -> None:
        for result in results:
            output = block_text(result.get("content"))
            name, arguments = self.calls.get(str(result.get("tool_use_id")), ("", {}))
            if not result.get("is_error"):
                path = arguments.get("file_path") or arguments.get("notebook_path")
                if name in EDIT_TOOLS and isinstance(path, str) and path.strip():
                    self.paths.append((_relative(path.strip(), self.cwd), path.strip()))
                continue
            if output.startswith(_REFUSAL):
                continue
            command = arguments.get("command")
            if name == "Bash" and isinstance(command, str) and command.strip():
                self.commands.append(plain_command(command))
            line = failure_line(output)
            if line is not None:
                self.errors.append(line)

    def gold(self) -> list[GoldFact]:
        aliases: dict[str, str] = {}
        for relative, absolute in self.paths:
            aliases.setdefault(relative, absolute)
        paths = _unique(relative for relative, _ in self.paths)
        return [
            *(
                GoldFact(
                    id=f"edited-{n}",
                    text=path,
                    kind="path",
                    aliases=[aliases[path]] if aliases[path] != path else [],
                )
                for n, path in enumerate(paths, start=1)
            ),
            *(
                GoldFact(id=f"failed-command-{n}", text=text, kind="command")
                for n, text in enumerate(_unique(self.commands), start=1)
            ),
            *(
                GoldFact(id=f"ran-{n}", text=text, kind="command")
                for n, text in enumerate(
                    [c for c in _unique(self.ran) if c not in self.commands], start=1
                )
            ),
            *(
                GoldFact(id=f"error-{n}", text=text, kind="error")
                for n, text in enumerate(_unique(self.errors), start=1)
            ),
            *(
                GoldFact(id=f"user-{n}", text=text, kind="constraint")
                for n, text in enumerate(_unique(self.typed[1:]), start=1)
            ),
        ]


def _spoken(record: Mapping[str, Any]) -> bool:
    """Whether a record is a message the model saw (not a note, a sidechain or a UI record)."""
    return (
        record.get("type") in ("user", "assistant")
        and isinstance(record.get("message"), Mapping)
        and not record.get("isSidechain")
        and not record.get("isVisibleInTranscriptOnly")
        and not record.get("isCompactSummary")
    )


def _is_boundary(record: Mapping[str, Any]) -> bool:
    return record.get("type") == "system" and record.get("subtype") == "compact_boundary"


def convert_claude_code(records: list[Any], *, source: str) -> Case:
    """One case from the parsed records of a Claude Code session (``source`` names the file)."""
    records = [r for r in records if isinstance(r, Mapping)]
    boundaries = [i for i, r in enumerate(records) if _is_boundary(r)]
    end = boundaries[0] if boundaries else len(records)
    cwd = next((r["cwd"] for r in records if isinstance(r.get("cwd"), str)), None)
    builder, facts = AnthropicBuilder(), _Facts(cwd)
    models: list[str] = []
    for record in records[:end]:
        if not _spoken(record):
            continue
        message = record["message"]
        if record["type"] == "assistant":
            builder.add_assistant(message.get("content"), message.get("id"))
            facts.tool_uses(message.get("content"))
            if isinstance(message.get("model"), str):
                models.append(message["model"])
        else:
            facts.user_words(message.get("content"))
            facts.results(builder.add_user(message.get("content")))
    messages = openai_messages(builder.finish(), where=source)
    if not messages:
        raise ConversionError(f"{source}: no user or assistant messages before the compaction")
    summary = next(
        (
            r
            for r in records[end:]
            if r.get("isCompactSummary") and isinstance(r.get("message"), Mapping)
        ),
        None,
    )
    given = []
    if summary is not None:
        text = block_text(summary["message"].get("content"))
        given = [GivenSummary(name="claude-code", text=text, covers=len(messages))]
    gold = facts.gold()
    edited = [fact.text for fact in gold if fact.kind == "path"]
    session = next((r["sessionId"] for r in records if isinstance(r.get("sessionId"), str)), None)
    boundary = records[end] if boundaries else {}
    compact = boundary.get("compactMetadata") if isinstance(boundary, Mapping) else None
    compact = compact if isinstance(compact, Mapping) else {}
    return _validated(
        source,
        id=session or Path(source).stem,
        messages=messages,
        facts=gold,
        probes=[Probe(question="Which file did the session edit first?", answer=edited[0])]
        if edited
        else [],
        summaries=given,
        metadata={
            "source": source,
            "format": "claude-code",
            "session_id": session,
            "cwd": cwd,
            "git_branch": next((r["gitBranch"] for r in records if r.get("gitBranch")), None),
            "version": next((r["version"] for r in records if r.get("version")), None),
            "model": models[-1] if models else None,
            "compactions": len(boundaries),
            "compact_trigger": compact.get("trigger"),
            "compact_pre_tokens": compact.get("preTokens"),
            "dropped_thinking_blocks": builder.dropped_thinking,
        },
    )
