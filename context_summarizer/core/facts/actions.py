"""What the agent did, read from its actions (``find_actions``): each tool call, or each shell
block an assistant wrote in its text (mini-swe-agent, SWE-agent), paired with the output that
answered it. From an action: the files it edited or read, the commands it ran, and the exit code
its output shows. Pure; every regex is linear and reads only bounded parts of a text.

What counts as editing a file:

- a call to an editing tool (Claude Code's ``Edit``/``Write``/``MultiEdit``/``NotebookEdit``,
  ``write_file``, ``edit_file``, ``apply_patch``, an editor tool whose ``command`` is
  ``create``/``str_replace``/``insert``): its path arguments;
- patch headers in any argument (``*** Update File: x``, ``+++ b/x``, ``diff --git a/x b/x``),
  or in the output of a command (``git diff`` shows what the agent changed);
- a shell command that writes: ``sed -i ... x``, ``> x``/``>> x`` (``cat <<EOF > x``), ``tee x``,
  ``touch x``, the target of ``cp``/``mv``; SWE-agent's ``create x`` and ``edit`` (the file it
  last opened).

Reading: a reading tool's path arguments (``Read``, ``view``, ``open``, ...), and the file
arguments of ``cat``/``head``/``tail``/``less``/``nl``/``sed -n``/``grep``, SWE-agent's ``open``.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..bounded_json import loads_bounded
from ..messages import message_text
from .commands import _HEREDOC_RE, shell_commands, starts_with_command
from .importance import command_family
from .recognizers import _path

_EDIT_WORDS = ("edit", "write", "create", "patch", "replace", "insert", "save", "append")
_READ_WORDS = ("read", "view", "open", "cat", "show", "glob", "grep", "search", "find", "list")
EDITOR_COMMANDS = frozenset({"view", "create", "str_replace", "insert", "undo_edit"})
"""The verbs an editor tool takes in its ``command`` argument (not shell commands)."""
_EDITOR_VERBS = EDITOR_COMMANDS | {"write", "append"}
_EDITOR_EDITS = _EDITOR_VERBS - {"view"}
_PATH_KEYS = frozenset({"path", "file_path", "filepath", "file", "filename", "notebook_path"})
_COMMAND_KEYS = ("command", "cmd")
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "pwsh", "powershell"})
_PATCH_HEADER_RE = re.compile(
    r"^(?:\*\*\* (?:Update|Add) File: (\S+)|\+\+\+ b/(\S+)|diff --git a/\S+ b/(\S+))",
    re.MULTILINE,
)
_REDIRECT_RE = re.compile(r"(?<![0-9&<>])>>?[ \t]*([^\s;&|<>()]+)")
_EXIT_RE = re.compile(
    r"(?i)(?:^|\n)[ \t]*(?:exit code:?|exit status:?|process exited with code)[ \t]*(-?\d+)"
    r"|<returncode>[ \t]*(-?\d+)[ \t]*</returncode>"
    r"|\"exit_code\"[ \t]*:[ \t]*(-?\d+)"
)
_PASSED_RE = re.compile(
    r"(?im)^(?:=+ )?\d+ passed\b(?!.*\b(?:failed|error))|^OK(?: \(|$)|^ok\s+\S|test result: ok\b"
    r"|\bBUILD SUCCESS(?:FUL)?\b|\b0 failures\b|\bAll \d* ?tests? passed\b"
)
_REFUSED_RE = re.compile(
    r"(?i)\s*(?:<tool_use_error>|error\b|the user doesn't want to proceed|permission denied"
    r"|failed\b|no such file)"
)
_SWE_EDIT_RE = re.compile(r"^edit\s+\d+(?::\d+)?\b")
_READERS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat", "grep", "rg", "open"})
_OUTPUT_HEAD = 2_000
_MAX_ARGUMENT = 300


@dataclass
class Action:
    """One thing the agent did: a call (or shell block) and the output that answered it."""

    index: int
    """Where the call is (a message index)."""
    output_index: int | None = None
    """Where its output is, when one answered it."""
    commands: list[str] = field(default_factory=list)
    """The shell commands it ran, one per line as written (first lines of multi-line ones)."""
    edited: list[str] = field(default_factory=list)
    read: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    """Its scalar string arguments that are not paths or commands (ids, codes, dates)."""
    exit_code: int | None = None
    by_tool: bool = False
    """Whether a tool (not a shell command) made its edits: an error answer undoes them."""

    @property
    def family(self) -> str | None:
        """What a later run of "the same check" shares (``importance.command_family``)."""
        return command_family(self.commands[0]) if self.commands else None


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError:  # an open quote: the heredoc's or the string's first line
        return line.split()


def _shell_files(line: str) -> tuple[list[str], list[str]]:
    """The files a shell line writes and reads."""
    edited = [m[1] for m in _REDIRECT_RE.finditer(line[:1_000]) if m[1] != "/dev/null"]
    read: list[str] = []
    for segment in re.split(r"&&|\|\||;|\|", line[:1_000]):
        words = _words(segment.strip())
        if not words:
            continue
        head, rest = words[0].rsplit("/", 1)[-1], [w for w in words[1:] if not w.startswith("-")]
        if head == "sed" and any(w.startswith("-i") for w in words[1:]):
            edited += rest[1:]
        elif head == "tee" or head == "touch":
            edited += rest
        elif head in ("cp", "mv") and len(rest) >= 2:
            edited.append(rest[-1])
        elif head == "create" and rest:  # SWE-agent
            edited.append(rest[0])
        elif head in _READERS or (head == "sed" and "-n" in words):
            read += rest[1:] if head in ("grep", "rg", "sed") else rest
    return [p for p in edited if _path(p)], [p for p in read if _path(p)]


def _script_lines(script: str, limit: int = 50) -> Iterator[str]:
    """The first ``limit`` lines of a shell script that are commands: a heredoc's body (the
    file ``cat <<EOF > x.py`` writes, its code full of ``>``) is skipped to its terminator."""
    terminator: str | None = None
    for line in script.splitlines()[:limit]:
        if terminator is not None:
            terminator = None if line.strip() == terminator else terminator
            continue
        yield line
        marker = _HEREDOC_RE.search(line[:1_000])
        terminator = marker[2] if marker is not None else None


def _text_commands(text: str) -> list[str]:
    """The shell lines of an assistant message that acts in its text (a fenced block)."""
    if "```" not in text:
        return []
    found = [command for _, command in shell_commands(text)]
    if found:
        return found
    # SWE-agent's actions (``open``, ``edit 3:5``, ``create``) in an unlabelled block
    block = re.search(r"```[ \t]*\n(.{1,2000}?)\n[ \t]*```", text, re.DOTALL)
    lines = block[1].strip().splitlines() if block else []
    return lines[:1] if lines and not starts_with_command(lines[0]) else []


def decode_arguments(arguments: Any) -> Any:
    """A tool call's arguments JSON-decoded, or as they are when they are not JSON (or nest
    past the body's limits): then they are read as text."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            return loads_bounded(arguments)
    return arguments


def _calls(message: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            function = call["function"]
            arguments = decode_arguments(function.get("arguments"))
            yield str(call.get("id") or ""), str(function.get("name") or ""), arguments


def shell_script(value: Any) -> str | None:
    """The shell script a ``command``/``cmd`` argument runs (a string, or an argv list such as
    ``["bash", "-lc", "pytest -q"]``), stripped; None when it is none."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        shell_c = len(value) >= 3 and value[0] in _SHELLS and value[1] in ("-c", "-lc")
        value = value[2] if shell_c else " ".join(value)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _call_action(index: int, name: str, arguments: Any) -> Action:
    action = Action(index, by_tool=True)
    if not isinstance(arguments, Mapping):
        arguments = {"input": arguments} if isinstance(arguments, str) else {}
    lowered = name.casefold()
    verb = arguments.get("command")
    editor = isinstance(verb, str) and verb in _EDITOR_VERBS
    for key in _COMMAND_KEYS:
        command = None if editor else shell_script(arguments.get(key))
        if command is not None:
            for line in command.splitlines()[:1]:
                action.commands.append(line.strip())
            for line in _script_lines(command):
                edited, read = _shell_files(line)
                action.edited += edited
                action.read += read
    paths = [
        v.strip()
        for k, v in arguments.items()
        if str(k).casefold() in _PATH_KEYS and isinstance(v, str) and 0 < len(v) <= _MAX_ARGUMENT
    ]
    if editor:
        (action.edited if verb in _EDITOR_EDITS else action.read).extend(paths)
    elif any(word in lowered for word in _EDIT_WORDS):
        action.edited += paths
    elif any(word in lowered for word in _READ_WORDS):
        action.read += paths
    for value in _scalars(arguments):
        action.edited += [next(g for g in m.groups() if g) for m in _patch_headers(value)]
        if value not in paths and value != verb and _ID_RE.fullmatch(value) and not _path(value):
            action.arguments.append(value)
    return action


def _scalars(value: Any, depth: int = 0) -> Iterator[str]:
    """The strings inside a call's decoded arguments, nested lists and objects included (to a
    depth of 4: a booking's ``flights[].flight_number``)."""
    if isinstance(value, str):
        yield value
    elif depth < 4 and isinstance(value, Mapping):
        for item in value.values():
            yield from _scalars(item, depth + 1)
    elif depth < 4 and isinstance(value, list):
        for item in value[:100]:
            yield from _scalars(item, depth + 1)


_ID_RE = re.compile(r"(?=[\w\-.:]*(?:\d|_))[A-Za-z0-9][\w\-.:]{2,63}|[A-Z][A-Z0-9]{2,11}")


def _patch_headers(text: str) -> Iterator[re.Match[str]]:
    if "***" in text or "+++" in text or "diff --git" in text:
        yield from _PATCH_HEADER_RE.finditer(text[:200_000])


def _text_action(index: int, text: str, opened: str | None) -> tuple[Action, str | None]:
    action = Action(index, commands=_text_commands(text))
    for line in action.commands:
        edited, read = _shell_files(line)
        action.edited += edited
        action.read += read
        words = line.split()
        if words[0] in ("open", "create") and len(words) > 1:
            opened = words[1]
        elif _SWE_EDIT_RE.match(line) and opened is not None:
            action.edited.append(opened)
    return action, opened


def exit_code(output: str) -> int | None:
    """The exit code an output reports (``Exit code 1``, ``<returncode>0</returncode>``,
    ``"exit_code": 2``, ...), from its head and tail; None when it shows none."""
    for part in (output[:_OUTPUT_HEAD], output[-_OUTPUT_HEAD:]):
        match = _EXIT_RE.search(part)
        if match is not None:
            return int(next(g for g in match.groups() if g is not None))
    return None


def passed(output: str) -> bool:
    """Whether an output reads as a passing run (``5 passed``, ``OK``, ``test result: ok``,
    ``BUILD SUCCESS``, ...), from its head and tail."""
    return any(_PASSED_RE.search(part) for part in (output[:_OUTPUT_HEAD], output[-_OUTPUT_HEAD:]))


def find_actions(messages: Sequence[Mapping[str, Any]]) -> list[Action]:
    """Every action in ``messages``, in order, each paired with its output when there is one:
    the tool message answering the call's id, or (for an action in text) the next message when
    it is a user or tool message."""
    actions: list[Action] = []
    waiting: dict[str, Action] = {}
    opened: str | None = None
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            calls = list(_calls(message))
            for call_id, name, arguments in calls:
                action = _call_action(index, name, arguments)
                actions.append(action)
                waiting[call_id] = action
            if not calls:
                action, opened = _text_action(index, message_text(message), opened)
                if action.commands or action.edited:
                    actions.append(action)
                    following = messages[index + 1] if index + 1 < len(messages) else None
                    if following is not None and following.get("role") in ("user", "tool"):
                        action.output_index = index + 1
        elif role in ("tool", "function"):
            answered = waiting.pop(str(message.get("tool_call_id") or ""), None)
            if answered is not None:
                answered.output_index = index
    for action in actions:
        if action.output_index is not None:
            output = message_text(messages[action.output_index])
            action.exit_code = exit_code(output)
            if action.by_tool and _REFUSED_RE.match(output[:300]):
                action.edited = []  # the edit was refused or failed: nothing was written
            # A diff the agent's command printed (``git diff``) names the files it changed.
            for match in _patch_headers(output):
                path = next(g for g in match.groups() if g)
                action.edited.append(path)
    return actions
