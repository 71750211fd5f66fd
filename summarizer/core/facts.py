"""The fact ledger: key facts pulled out of compacted turns by code, not by the model.

``extract_facts`` reads a span of conversation and keeps what an agent must not forget (paths,
URLs, identifiers, errors, commands, tests, commits, quantities); ``merge_ledger`` folds it into
the previous ledger under a token bound; ``render_ledger``/``parse_ledger`` write it into the
summary message and read it back; ``mentions``/``score_summary`` measure how many facts a summary
kept. Everything is pure and deterministic. Extraction prefers precision over recall, and every
regex is linear: long whitespace-free runs are skipped and line rules only read a line's head.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .messages import message_text

FactKind = Literal["path", "url", "identifier", "error", "command", "test", "commit", "quantity"]
"""What a fact is about."""

_KINDS: dict[str, FactKind] = {kind: kind for kind in get_args(FactKind)}
KIND_ORDER: tuple[FactKind, ...] = (
    *("error", "test", "command", "path"),
    *("identifier", "commit", "url", "quantity"),
)
"""The fixed order ``render_ledger`` groups kinds in (most important first)."""

EVICTION_ORDER: tuple[FactKind, ...] = (
    "quantity",
    "test",
    "identifier",
    "url",
    "command",
    "path",
    "commit",
    "error",
)
"""Which kinds a full ledger gives up first."""

LEDGER_HEADER = "## Fact ledger (extracted verbatim from the compacted turns)"
"""The line that opens a rendered ledger."""

_LINE_BREAKS = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


class Fact(BaseModel):
    """One fact: its kind and its text as it appeared (single line, stripped, non-empty)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FactKind
    text: str

    @field_validator("text")
    @classmethod
    def _one_line(cls, value: str) -> str:
        cleaned = _LINE_BREAKS.sub(" ", value).strip()
        if not cleaned:
            raise ValueError("a fact's text must not be empty")
        return cleaned

    @property
    def key(self) -> str:
        """The normalised form used to deduplicate and match (``normalize_fact_text``)."""
        return normalize_fact_text(self.text)


# --- normalisation and matching ---------------------------------------------------------------

_SYMMETRIC_QUOTES = "\"'`"
_LEAD = ",;:!?*"
_TRAIL = ".,;:!?*"
_CLOSERS = {")": "(", "]": "[", "}": "{", "”": "“", "’": "‘", "»": "«"}
_OPENERS = {opener: closer for closer, opener in _CLOSERS.items()}


def _strip_edges(text: str) -> str:
    """Strip edge punctuation, and quotes or brackets left unbalanced by it (bounded work)."""
    for _ in range(8):
        before = text = text.lstrip(_LEAD).rstrip(_TRAIL).strip()
        first, last, inner = text[:1], text[-1:], text[1:-1]
        pair = _OPENERS.get(first) or (first if first in _SYMMETRIC_QUOTES else None)
        if len(text) > 1 and last == pair and first not in inner and last not in inner:
            text = inner  # a wrapped whole: 'x', `x`, (x), “x”
        elif last in _SYMMETRIC_QUOTES and text.count(last) % 2:
            text = text[:-1]
        elif first in _SYMMETRIC_QUOTES and text.count(first) % 2:
            text = text[1:]
        if text and text[-1] in _CLOSERS and text.count(text[-1]) > text.count(_CLOSERS[text[-1]]):
            text = text[:-1]
        if text and text[0] in _OPENERS and text.count(text[0]) > text.count(_OPENERS[text[0]]):
            text = text[1:]
        if text == before:
            break
    return text.strip()


def normalize_fact_text(text: str) -> str:
    """Casefold, collapse whitespace, ``\\`` to ``/``, strip quotes/punctuation, leading ``./``."""
    text = _strip_edges(" ".join(text.casefold().replace("\\", "/").split()))
    while text.startswith("./"):
        text = _strip_edges(text[2:])
    return text


class NormalizedText(str):
    """A summary already normalised by ``normalize_summary``; ``mentions`` uses it as is."""

    __slots__ = ()


def normalize_summary(summary: str) -> NormalizedText:
    """Normalise a summary once, to test many facts against it with ``mentions``."""
    if isinstance(summary, NormalizedText):
        return summary
    return NormalizedText(normalize_fact_text(summary))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _contains(haystack: str, needle: str) -> bool:
    """``needle`` occurs in ``haystack`` without being glued to a longer word on either side."""
    if not needle:
        return False
    start = 0
    glue_left, glue_right = _is_word(needle[0]), _is_word(needle[-1])
    while (i := haystack.find(needle, start)) != -1:
        end = i + len(needle)
        left_ok = i == 0 or not (glue_left and _is_word(haystack[i - 1]))
        right_ok = end == len(haystack) or not (glue_right and _is_word(haystack[end]))
        if left_ok and right_ok:
            return True
        start = i + 1
    return False


_HEAD_CHARS = 60
_EXC_NAME = r"(?:[A-Za-z_]\w*+\.)*+[A-Z]\w*?(?:Error|Exception|Exit|Interrupt)\b"
_EXC_WITH_MESSAGE = re.compile(_EXC_NAME + r":\s*\S")
_QTY_SPLIT = re.compile(r"(\d[\d,.]*)[ \t]?([^\d\s].*)")


def _head(key: str) -> str:
    """The first ~60 characters of a normalised error line, cut at a word boundary."""
    if len(key) <= _HEAD_CHARS:
        return key
    cut = key[:_HEAD_CHARS]
    if key[_HEAD_CHARS] != " " and " " in cut:
        cut = cut.rsplit(" ", 1)[0]
    return _strip_edges(cut)


def _variants(text: str, kind: FactKind | None) -> list[str]:
    key = normalize_fact_text(text)
    out = [key]
    if kind == "error" or (kind is None and _error_line(text) is not None):
        out.append(_head(key))
        exc = _EXC_WITH_MESSAGE.search(text[:300])
        if exc is not None and exc.start() > 0:
            out.append(_head(normalize_fact_text(text[exc.start() :])))
    qty = _QTY_SPLIT.fullmatch(key) if kind in (None, "quantity") else None
    if qty is not None and _QTY_RE.fullmatch(text.strip()):
        out += [qty[1] + qty[2], f"{qty[1]} {qty[2]}"]
    return [v for v in dict.fromkeys(out) if len(v) >= 2 or v == key]


def mentions(
    summary: str,
    fact_text: str,
    aliases: Sequence[str] = (),
    *,
    kind: FactKind | None = None,
) -> bool:
    """Whether ``summary`` mentions the fact (or an alias), after normalising both.

    A match is a normalised substring not glued to a longer word. Paths match with either
    separator and with or without ``./``; an error line also matches by its first ~60 characters
    or by its ``ExceptionType: message`` head; a quantity matches with or without the space before
    its unit. ``kind`` enables those leniencies explicitly; when None they follow from the text.
    Pass ``normalize_summary(summary)`` to normalise a summary only once for many facts.
    """
    haystack = normalize_summary(summary)
    candidates = _variants(fact_text, kind)
    candidates += [normalize_fact_text(alias) for alias in aliases]
    return any(_contains(haystack, c) for c in candidates)


class Score(BaseModel):
    """How many of the facts a summary mentions."""

    total: int
    mentioned: int
    recall: float
    missed: list[Fact]


def score_summary(
    summary: str,
    facts: Sequence[Fact],
    *,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> Score:
    """Score ``summary`` on ``facts`` (each counted as given); ``aliases`` maps a fact's key."""
    haystack = normalize_summary(summary)
    missed = [
        fact
        for fact in facts
        if not mentions(haystack, fact.text, (aliases or {}).get(fact.key, ()), kind=fact.kind)
    ]
    total = len(facts)
    mentioned = total - len(missed)
    return Score(
        total=total, mentioned=mentioned, recall=mentioned / total if total else 1.0, missed=missed
    )


# --- ledger ------------------------------------------------------------------------------------

_ITEM_RE = re.compile(r"- ([a-z]+): (.+)")
_LINE_OVERHEAD = 1  # the newline ending each rendered line


def _render_line(fact: Fact) -> str:
    return f"- {fact.kind}: {fact.text}"


def merge_ledger(
    previous: Sequence[Fact],
    new: Sequence[Fact],
    *,
    max_tokens: int,
    count_tokens: Callable[[str], int],
) -> list[Fact]:
    """The next ledger, newest first, bounded to ``max_tokens`` as rendered.

    ``new`` is taken in reverse (``extract_facts`` lists facts by first appearance, so the last
    one first appeared most recently), then ``previous`` in its own order; a key seen earlier in
    that sequence wins, so a fact seen again keeps its newest text. While the header plus every
    line (``count_tokens`` of each + 1 for its newline) is over ``max_tokens``, facts are dropped
    by kind in ``EVICTION_ORDER`` (quantities first, errors last), oldest first within a kind: a
    flood of new test ids or timings never pushes out an old error or decision-bearing path.
    """
    ordered: list[Fact] = []
    seen: set[str] = set()
    for fact in [*reversed(new), *previous]:
        if fact.key not in seen:
            seen.add(fact.key)
            ordered.append(fact)
    costs = [count_tokens(_render_line(fact)) + _LINE_OVERHEAD for fact in ordered]
    used = count_tokens(LEDGER_HEADER) + _LINE_OVERHEAD + sum(costs)
    dropped: set[int] = set()
    for kind in EVICTION_ORDER:
        if used <= max_tokens:
            break
        for i in range(len(ordered) - 1, -1, -1):
            if used <= max_tokens:
                break
            if ordered[i].kind == kind:
                dropped.add(i)
                used -= costs[i]
    if used > max_tokens:  # only the header is left
        return []
    return [fact for i, fact in enumerate(ordered) if i not in dropped]


def render_ledger(facts: Sequence[Fact]) -> str:
    """The ledger block: header, then ``- kind: text`` lines grouped in ``KIND_ORDER``.

    Within a kind, facts keep their ledger order. An empty ledger renders as ``""``.
    """
    if not facts:
        return ""
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    ordered = sorted(facts, key=lambda fact: rank[fact.kind])
    return "\n".join([LEDGER_HEADER, *map(_render_line, ordered)])


def parse_ledger(text: str) -> list[Fact]:
    """Read back the facts of the last ledger block in ``text`` (``[]`` when there is none).

    ``parse_ledger(render_ledger(facts))`` returns ``facts`` in rendered (kind-grouped) order.
    Items of an unknown kind are skipped; the block ends at the first line that is not an item.
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == LEDGER_HEADER]
    if not starts:
        return []
    facts: list[Fact] = []
    for line in lines[starts[-1] + 1 :]:
        match = _ITEM_RE.fullmatch(line.rstrip())
        if match is None:
            break
        kind = _KINDS.get(match[1])
        if kind is not None:
            facts.append(Fact(kind=kind, text=match[2]))
    return facts


# --- extraction --------------------------------------------------------------------------------

_MAX_TOKEN = 300  # a longer whitespace-free run is never a path, test id or commit
_MAX_FACT = 200  # error lines and commands are cut to this many characters
_LINE_HEAD = 1000  # line-level rules only read this much of a line
_COMMAND_KEYS = ("command", "cmd")
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "pwsh", "powershell"})

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
_HEX_RE = re.compile(r"[0-9a-f]{7,40}")
_COMMIT_WORD_RE = re.compile(r"(?i)\b(?:commit\w*|sha|rev(?:ision)?|head|merged?|cherry-pick)\b")
_PATH_RE = re.compile(
    r"([A-Za-z]:[\\/]|\\\\|~[\\/]|(?:\.\.?[\\/])+|[\\/])?((?:[\w.@+\-]+[\\/])*[\w.@+\-]+)"
)
_SEP_SPLIT_RE = re.compile(r"[\\/]")
_PART_SPLIT_RE = re.compile(r"[=,]")
_LINE_SUFFIX_RE = re.compile(r"(?::\d+){1,2}$")
_EXT_RE = re.compile(r"[^.]\.([A-Za-z0-9]{1,10})$")
_DOTFILE_RE = re.compile(r"\.[a-z][a-z0-9_.\-]{1,30}")
_EXT_WORDS = (
    "py pyi ipynb js mjs cjs jsx ts tsx vue svelte json jsonl yaml yml toml ini cfg conf env md "
    "rst txt csv tsv xml html htm css scss sass less sh bash zsh fish ps1 bat c h cc cpp cxx hpp "
    "rs go java kt kts scala rb php pl lua swift cs fs r jl dart ex exs erl hs ml sql graphql "
    "proto tf tfvars lock log diff patch db sqlite pem gz tgz zip whl gradle"
)
_BARE_EXTS = frozenset(_EXT_WORDS.split())
_NAME_WORDS = "Dockerfile Containerfile Makefile Justfile Procfile Gemfile Rakefile Jenkinsfile"
_BARE_NAMES = frozenset([*_NAME_WORDS.split(), "Vagrantfile"])
_EXC_LINE_RE = re.compile(_EXC_NAME + r"(?::|\s*$)")
_ERROR_LINE_RE = re.compile(
    r"(?:(?i:error|fatal|panic)(?:\[[\w\-]+\])?:\s*\S"  # error: / error[E0425]: / fatal: / panic:
    r"|[^\s:]+(?::\d+){1,2}:\s*(?:fatal\s+)?error\b"  # src/a.c:3:1: error / mypy lines
    r"|(?:FAILED|ERROR)\s+\S*(?:::|\.py\b|/)"  # pytest summary lines
    r"|npm ERR!)"
)
_ERROR_TAIL_RE = re.compile(
    r":\s*(?:command not found|No such file or directory|Permission denied)"
)
_GUTTER_RE = re.compile(r"E {2,}(\S.*)")
_PROMPT_RE = re.compile(r"\s*\$\s+([^\s\d$].*)")
_SPACED_UNITS = (
    r"(?i:[kmgtp]i?b)|bytes?|ms|µs|ns|secs?|seconds?|minutes?|mins?|hours?|hrs?|days?|%"
    r"|tokens?|requests?|req/s|rps|qps|rpm|tpm|tok/s|ops/s|[kMG]?Hz|fps"
)
_QTY_RE = re.compile(
    r"(?<![\w.\\/])(\d{1,15}(?:,\d{3})*(?:\.\d{1,6})?[kKM]?)"
    rf"(?:[ \t]?(?:{_SPACED_UNITS})|(s|h|B))(?![\w/]|\.\w)"
)
_NOT_SECONDS_RE = re.compile(r"1[89]\d0|20\d0|[45]00")  # decades, HTTP "500s"
_PORT_RE = re.compile(r"(?i)\bport[ \t]*[:=]?[ \t]*(\d{2,5})\b")


def _error_line(line: str) -> str | None:
    """The error fact of one line (trimmed, bounded), or None when it is no error line."""
    head = line[:_LINE_HEAD].strip()
    if _EXC_LINE_RE.match(head) or _ERROR_LINE_RE.match(head) or _ERROR_TAIL_RE.search(head):
        return _bound(head)
    return None


def _bound(text: str) -> str:
    text = text.strip()
    if len(text) <= _MAX_FACT:
        return text
    cut = text[:_MAX_FACT]
    space = cut.rfind(" ")
    return (cut[:space] if space >= _MAX_FACT * 3 // 4 else cut).rstrip()


def _path(token: str) -> str | None:
    """``token`` as a file path, or None. Precise rather than greedy:

    a ``/``, ``./``, ``../``, ``~/``, drive or UNC prefix makes a path; otherwise ``a/b.ext``
    (extension with a letter) or ``a/b/c``; ``a\\b`` needs an extension; a bare name needs a
    known source extension, a dotfile name or a name like ``Makefile``. Never a URL, never
    all-numeric parts (``1/2``, ``2024/01/02``), never ``and/or``. ``:line[:col]`` is dropped.
    """
    if "://" in token:
        return None
    token = _LINE_SUFFIX_RE.sub("", token)
    if len(token) > 1:
        token = token.rstrip("/\\")
    match = _PATH_RE.fullmatch(token)
    if match is None:
        return None
    prefix, body = match[1], match[2]
    parts = _SEP_SPLIT_RE.split(body)
    if not any(c.isalpha() for c in body) or all(p[:1].isdigit() for p in parts):
        return None
    ext = _EXT_RE.search(parts[-1])
    has_ext = ext is not None and any(c.isalpha() for c in ext[1])
    if prefix:
        ok = prefix != "/" or len(body) >= 2
    elif len(parts) == 1:
        bare_ext = ext is not None and has_ext and ext[1].casefold() in _BARE_EXTS
        ok = bare_ext or body in _BARE_NAMES or _DOTFILE_RE.fullmatch(body) is not None
    elif "\\" in body:
        ok = has_ext
    else:
        ok = has_ext or len(parts) >= 3
    return token if ok else None


def _commit(token: str, commit_context: bool) -> bool:
    if not _HEX_RE.fullmatch(token) or token.isdigit() or not any(c.isdigit() for c in token):
        return False
    return len(token) <= 12 or len(token) == 40 or commit_context


def _quantity(line: str, match: re.Match[str]) -> bool:
    if match[2] == "s" and _NOT_SECONDS_RE.fullmatch(match[1]):
        return False
    before = line[max(0, match.start() - 4) : match.start()].rstrip(" ")
    after = line[match.end() : match.end() + 4].lstrip(" ")
    return not (before.endswith("[") and after.startswith("]"))  # pytest's "[ 50%]"


class _Collector:
    """Candidate facts of one message with their positions, for first-appearance order."""

    def __init__(self) -> None:
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
        if (prompt := _PROMPT_RE.match(head)) is not None:
            self.add(pos, "command", _bound(prompt[1]))
        for span in _CODE_SPAN_RE.finditer(line):
            self._code_span(span[1].strip(), pos + span.start())
        commit_context = _COMMIT_WORD_RE.search(head) is not None
        define = _DEF_LINE_RE.match(head) is not None
        for match in _TOKEN_RE.finditer(line):
            if len(match[0]) <= _MAX_TOKEN:
                self._token(match[0], pos + match.start(), commit_context, define)
        for qty in _QTY_RE.finditer(line):
            if _quantity(line, qty):
                self.add(pos + qty.start(), "quantity", qty[0])
        for port in _PORT_RE.finditer(head):
            self.add(pos + port.start(), "quantity", f"port {port[1]}")
        return gutter is not None

    def _code_span(self, content: str, pos: int) -> None:
        content = content.removesuffix("()")
        if (
            len(content) >= 2
            and _IDENT_RE.fullmatch(content)
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
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        shell_c = len(value) >= 3 and value[0] in _SHELLS and value[1] in ("-c", "-lc")
        value = value[2] if shell_c else " ".join(value)
    if not isinstance(value, str) or not value.strip():
        return None
    return _bound(value.strip().splitlines()[0])


def _calls(message: Mapping[str, Any]) -> Iterator[Any]:
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            yield call["function"].get("arguments")
    if isinstance(message.get("function_call"), Mapping):
        yield message["function_call"].get("arguments")


def _message_facts(message: Mapping[str, Any]) -> list[Fact]:
    collector = _Collector()
    plain = {k: v for k, v in message.items() if k not in ("tool_calls", "function_call")}
    content = message_text(plain)
    collector.scan(content, 0)
    base = len(content) + 1
    for arguments in _calls(message):
        try:
            decoded = json.loads(arguments) if isinstance(arguments, str) else arguments
        except (ValueError, RecursionError):
            decoded = arguments
        if isinstance(decoded, Mapping):
            for key in _COMMAND_KEYS:
                command = _command(decoded.get(key))
                if command is not None:
                    collector.add(base, "command", command)
        for piece in _strings(decoded):
            collector.scan(piece, base)
            base += len(piece) + 1
    return [fact for _, _, fact in sorted(collector.found, key=lambda item: item[:2])]


def extract_facts(messages: Sequence[Mapping[str, Any]]) -> list[Fact]:
    """The facts in ``messages`` (all roles, tool calls and outputs), by first appearance.

    Deduplicated by ``Fact.key``: the first occurrence's kind and text are kept. Tool-call
    arguments are JSON-decoded (their ``command``/``cmd`` is a command; every string value is
    scanned). Error lines are whole lines (bounded to 200 characters) that start with an
    exception (``KeyError: 'x'``), ``error:``/``fatal:``/``panic:``, ``file:line: error``, pytest's
    ``FAILED``/``ERROR``, or end in "command not found" and kin; of pytest's ``E   `` block only
    the first line is kept, without the gutter; the constant ``Traceback (most recent call
    last):`` header is not a fact, and exception names inside prose or code are not either.
    Identifiers come only from identifier-like code spans; passing tests in verbose output and
    ``def test_...`` lines are skipped; quantities need a unit (or read ``port N``).
    """
    facts: list[Fact] = []
    seen: set[str] = set()
    for message in messages:
        for fact in _message_facts(message):
            if fact.key not in seen:
                seen.add(fact.key)
                facts.append(fact)
    return facts
