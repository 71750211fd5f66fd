"""What text is a fact of which kind: the tests for an error line, a path, a commit and a
quantity, which extraction applies and matching reuses for its leniencies. Every regex is
linear, and line rules only read a line's head."""

from __future__ import annotations

import re

_EXC_NAME = r"(?:[A-Za-z_]\w*+\.)*+[A-Z]\w*?(?:Error|Exception|Exit|Interrupt)\b"
_MAX_FACT = 200  # error lines and commands are cut to this many characters
_LINE_HEAD = 1000  # line-level rules only read this much of a line
_HEX_RE = re.compile(r"[0-9a-f]{7,40}")
_PATH_RE = re.compile(
    r"([A-Za-z]:[\\/]|\\\\|~[\\/]|(?:\.\.?[\\/])+|[\\/])?((?:[\w.@+\-]+[\\/])*[\w.@+\-]+)"
)
_SEP_SPLIT_RE = re.compile(r"[\\/]")
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
_SPACED_UNITS = (
    r"(?i:[kmgtp]i?b)|bytes?|ms|µs|ns|secs?|seconds?|minutes?|mins?|hours?|hrs?|days?|%"
    r"|tokens?|requests?|req/s|rps|qps|rpm|tpm|tok/s|ops/s|[kMG]?Hz|fps"
)
_QTY_RE = re.compile(
    r"(?<![\w.\\/])(\d{1,15}(?:,\d{3})*(?:\.\d{1,6})?[kKM]?)"
    rf"(?:[ \t]?(?:{_SPACED_UNITS})|(s|h|B))(?![\w/]|\.\w)"
)
_NOT_SECONDS_RE = re.compile(r"1[89]\d0|20\d0|[45]00")  # decades, HTTP "500s"


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
