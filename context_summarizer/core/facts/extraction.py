"""The facts one message states (``_message_facts``): its text, tool-call arguments and outputs
scanned line by line, in order of position. ``survey`` gathers them over a span.

Tool-call arguments are JSON-decoded: their ``command``/``cmd`` is a command (not an editor
tool's verb, such as ``view``), their path arguments (``path``, ``file_path``, ``directory``,
...) are paths whatever their shape, and every string value is scanned. Commands also come from
fenced shell blocks, from code spans that start with a known tool (``mix test``, ``./gradlew
build``) and from ``$``/``PS>`` prompt lines (``commands``). Error lines are whole lines
(bounded to 200 characters) that read as an error in any runtime (``errors``: exceptions,
compiler diagnostics, test runners' failures, crashes); of pytest's ``E   `` block only the
first line is kept, without the gutter; the constant ``Traceback (most recent call last):``
header is not a fact, and exception names inside prose or code are not either; an ``ERR-``-style
code is an error wherever it stands. Failing tests come from pytest ids, ``test_...`` names and
Go, Rust and ExUnit failure lines. Identifiers come from identifier-like code spans, and from
the codes (capitals and digits, ``HAT078``) an assistant or a user wrote; a code span of one
lowercase word (`` `tests` ``, `` `lambda` ``) is a word, not an identifier;
passing tests in verbose output and ``def test_...`` lines are skipped; quantities need a unit
(or read ``port N``), and a measured duration (``0.3s``) is not one. Paths without a directory
need a known extension or name (``recognizers._path``). Precision over recall: long
whitespace-free runs are skipped."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from ..messages import message_text
from .actions import EDITOR_COMMANDS, decode_arguments, shell_script
from .commands import prompt_command, shell_commands, span_command
from .errors import _LINE_HEAD, _bound, _error_line, error_codes, failed_test
from .fact import Fact, FactKind, _strip_edges
from .recognizers import _BARE_NAMES, _QTY_RE, _commit, _path, _quantity

_MAX_TOKEN = 300  # a longer whitespace-free run is never a path, test id or commit
_COMMAND_KEYS = ("command", "cmd")
_PATH_KEYS = frozenset(
    {
        *("path", "file_path", "filepath", "file", "filename", "notebook_path", "target_file"),
        *("directory", "dir", "cwd", "workdir", "working_dir", "paths", "files"),
    }
)

_URL_RE = re.compile(r"https?://[^\s<>\"'`{}|\\^\[\]]{1,2048}")
_TOKEN_RE = re.compile(r"[^\s\"'`<>(){}|;]+")
_CODE_SPAN_RE = re.compile(r"(?<!`)`([^`\n]{1,200})`(?!`)")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*(?:(?:\.|::|->)[A-Za-z_]\w*)*")
_IDENT_STOP = frozenset({"true", "false", "none", "null", "nil", "self", "this", "cls"})
_NODE_ID_RE = re.compile(r"(?:[\w.\-]+[\\/])*[\w.\-]+\.py(?:::[\w.\-]+)+(?:\[[^\s\]]*\])?")
_TEST_NAME_RE = re.compile(r"test_\w+(?:\[[^\s\]]*\])?")
_DEF_LINE_RE = re.compile(r"\s*(?:async\s+)?def\s")
_PASS_LINE_RE = re.compile(
    r"(?:\S+::\S+\s+(?:PASSED|SKIPPED|XFAIL|XPASS)|(?:PASSED|SKIPPED|XFAIL|XPASS)\s)"
)
_COMMIT_WORD_RE = re.compile(r"(?i)\b(?:commit\w*|sha|rev(?:ision)?|head|merged?|cherry-pick)\b")
_PART_SPLIT_RE = re.compile(r"[=,]")
_GUTTER_RE = re.compile(r"E {2,}(\S.*)")
_CODE_ID_RE = re.compile(r"(?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*\d)[A-Z0-9]{5,12}")
_PORT_RE = re.compile(r"(?i)\bport[ \t]*[:=]?[ \t]*(\d{2,5})\b")


class _Collector:
    """Candidate facts of one message with their positions, for first-appearance order."""

    def __init__(self, *, said: bool = False) -> None:
        self.said = said  # the text an assistant or a user wrote (not a tool's output)
        self.found: list[tuple[int, int, Fact]] = []
        self.added: set[tuple[str, str]] = set()  # a repeat is always at a later position

    def add(self, pos: int, kind: FactKind, text: str) -> None:
        if (kind, text) in self.added:
            return
        self.added.add((kind, text))
        try:
            fact = Fact(kind=kind, text=text)
        except ValidationError:  # nothing left once line breaks and edges are cleaned
            return
        self.found.append((pos, len(self.found), fact))

    def scan(self, text: str, base: int) -> None:
        def blank(match: re.Match[str]) -> str:
            url = _strip_edges(match[0])
            if len(url) > len("https://"):
                self.add(base + match.start(), "url", url)
            return " " * len(match[0])

        text = _URL_RE.sub(blank, text)
        if "```" in text:
            for offset, command in shell_commands(text):
                self.add(base + offset, "command", command)
        offset = base
        in_gutter = False
        for line in text.split("\n"):
            in_gutter = self._line(line.rstrip("\r"), offset, in_gutter)
            offset += len(line) + 1

    def _line(self, line: str, pos: int, in_gutter: bool) -> bool:
        head = line[:_LINE_HEAD]
        if not head.strip() or _PASS_LINE_RE.match(head.strip()):
            return False
        gutter = _GUTTER_RE.match(head)
        if gutter is not None:
            if not in_gutter:  # only the first line of pytest's "E   " block
                self.add(pos, "error", _bound(gutter[1]))
        elif (error := _error_line(head)) is not None:
            self.add(pos, "error", error)
        for at, code in error_codes(head):
            self.add(pos + at, "error", code)
        if (test := failed_test(head)) is not None:
            self.add(pos, "test", test)
        if (command := prompt_command(head)) is not None:
            self.add(pos, "command", command)
        for span in _CODE_SPAN_RE.finditer(line):
            self._code_span(span[1].strip(), pos + span.start())
        commit_context = _COMMIT_WORD_RE.search(head) is not None
        define = _DEF_LINE_RE.match(head) is not None
        for match in _TOKEN_RE.finditer(line):
            start = match.start()
            if start and line[start - 1] == "<" and match[0][:1] == "/":
                continue  # a closing tag (``</environment_context>``), never a path
            if len(match[0]) <= _MAX_TOKEN:
                self._token(match[0], pos + match.start(), commit_context, define)
        for qty in _QTY_RE.finditer(line):
            if _quantity(line, qty):
                self.add(pos + qty.start(), "quantity", qty[0])
        for port in _PORT_RE.finditer(head):
            self.add(pos + port.start(), "quantity", f"port {port[1]}")
        return gutter is not None

    def _code_span(self, content: str, pos: int) -> None:
        if (command := span_command(content)) is not None:
            self.add(pos, "command", command)
            return
        content = content.removesuffix("()")
        if (
            len(content) >= 2
            and _IDENT_RE.fullmatch(content)
            and not (content.islower() and content.isalpha())  # `tests`, `lambda`, `src`
            and content.casefold() not in _IDENT_STOP
            and not _TEST_NAME_RE.fullmatch(content)
            and not _commit(content, True)
            and _path(content) is None
        ):
            self.add(pos, "identifier", content)

    def _token(self, token: str, pos: int, commit_context: bool, define: bool) -> None:
        if (token.isalpha() and token not in _BARE_NAMES) or token.isdigit():
            return  # the common case, and never a fact
        token = _strip_edges(token)
        if _NODE_ID_RE.fullmatch(token) or (not define and _TEST_NAME_RE.fullmatch(token)):
            self.add(pos, "test", token)
        elif _commit(token, commit_context):
            self.add(pos, "commit", token)
        elif self.said and _CODE_ID_RE.fullmatch(token):
            self.add(pos, "identifier", token)  # HAT078, M05KNL: a code someone said
        elif "/" in token or "\\" in token or "." in token or token in _BARE_NAMES:
            for part in _PART_SPLIT_RE.split(token):
                path = _path(_strip_edges(part))
                if path is not None:
                    self.add(pos + max(0, token.find(part)), "path", path)


def _strings(value: Any) -> Iterator[str]:
    """Every string inside decoded JSON, in document order (iterative: any depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))


def _command(value: Any) -> str | None:
    script = shell_script(value)
    return None if script is None else _bound(script.splitlines()[0])


def _argument_paths(arguments: Mapping[str, Any]) -> Iterator[str]:
    """The values of a tool call's path arguments (``path``, ``file_path``, ``directory``, ...):
    paths whatever their shape, since the tool takes them as paths."""
    for key, value in arguments.items():
        if str(key).casefold() not in _PATH_KEYS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                item = item.strip()
                if item and len(item) <= _MAX_TOKEN and "\n" not in item and "://" not in item:
                    yield item


def _calls(message: Mapping[str, Any]) -> Iterator[Any]:
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            yield call["function"].get("arguments")
    if isinstance(message.get("function_call"), Mapping):
        yield message["function_call"].get("arguments")


def _message_facts(message: Mapping[str, Any]) -> list[Fact]:
    collector = _Collector(said=message.get("role") in ("user", "assistant"))
    plain = {k: v for k, v in message.items() if k not in ("tool_calls", "function_call")}
    content = message_text(plain)
    collector.scan(content, 0)
    base = len(content) + 1
    for arguments in _calls(message):
        decoded = decode_arguments(arguments)
        if isinstance(decoded, Mapping):
            for key in _COMMAND_KEYS:
                command = _command(decoded.get(key))
                if command is not None and command not in EDITOR_COMMANDS:
                    collector.add(base, "command", command)
            for path in _argument_paths(decoded):
                collector.add(base, "path", path)
        for piece in _strings(decoded):
            collector.scan(piece, base)
            base += len(piece) + 1
    return [fact for _, _, fact in sorted(collector.found, key=lambda item: item[:2])]
