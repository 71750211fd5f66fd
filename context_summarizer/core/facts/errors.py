"""What an error line is, in any runtime (``_error_line``), the ``ERR-``-style codes that stand
anywhere in a line (``error_codes``), and the failing tests that Go, Rust and ExUnit name
(``failed_test``). Every rule reads only a line's head and every regex is linear.

A line is an error when its head is one of:

- an exception: ``KeyError: 'x'``, ``django.db.utils.OperationalError: ...``,
  ``TypeError [ERR_INVALID_ARG_TYPE]: ...`` (Python, Node, Java, .NET, Ruby, ...);
- a diagnostic: ``error:``/``fatal:``/``panic:`` (``error[E0425]:``, ``Error [ERR_X]:``,
  ``Fatal error:``), ``file:line[:col]: error``, ``file(line,col): error`` (tsc, MSBuild),
  ``file:line:col - error TS...``, a Go compiler's ``x.go:line:col: ...``, a tool's
  ``collect2: error:``, Kotlin's ``e: file...``, PHP's ``PHP Fatal error:``;
- a runner's failure: pytest's ``FAILED``/``ERROR`` lines, ``FAIL`` (Jest, Go, unittest), Go's
  ``--- FAIL:``, Rust's ``test x ... FAILED`` and ``thread 'x' panicked at``, ExUnit's
  ``Assertion with == failed``, RSpec's ``Failure/Error:``, Maven's ``[ERROR]``, Gradle's
  ``FAILURE:`` and ``> Task :x FAILED``, make's ``make: ***``, ``CMake Error``, ctest's ``The
  following tests FAILED:``;
- a crash: Java's ``Exception in thread``/``Caused by:``, .NET's ``Unhandled exception.``,
  Elixir's ``** (RuntimeError) ...``, Ruby's ``file:line:in 'm': ... (NoMethodError)``, npm's
  ``npm ERR!``/``npm error``, Perl's ``Can't locate ... in @INC``;

or ends like a shell or linker failure (``command not found``, ``No such file or directory``,
``Permission denied``, ``: not found``, ``undefined reference to``, ``Segmentation fault``,
``Assertion `...' failed``).
"""

from __future__ import annotations

import re

_EXC_NAME = r"(?:[A-Za-z_]\w*+\.)*+[A-Z]\w*?(?:Error|Exception|Exit|Interrupt)\b"
_MAX_FACT = 200  # error lines and commands are cut to this many characters
_LINE_HEAD = 1000  # line-level rules only read this much of a line
_CODE = r"(?:\s?\[[\w\-]+\])?"  # error[E0425] / Error [ERR_X]

_EXC_LINE_RE = re.compile(_EXC_NAME + _CODE + r"(?::|\s*$)")
_ERROR_LINE_RE = re.compile(
    "|".join(
        [
            rf"(?i:fatal\s+error|error|fatal|panic){_CODE}:\s*\S",
            r"[^\s:]+(?::\d+){1,2}:\s*(?:fatal\s+)?error\b",  # src/a.c:3:1: error / mypy
            r"[^\s:(]+\(\d+(?:,\d+)?\):\s*(?:fatal\s+)?error\b",  # tsc, MSBuild: f(3,5): error
            r"[^\s:]+:\d+:\d+\s+-\s+error\b",  # tsc --pretty: f:3:5 - error TS2304
            r"[^\s:]+\.go:\d+:\d+:\s+\S",  # go build / go vet
            r"[^\s:]+:\s*(?:fatal\s+)?error:\s*\S",  # collect2: error: / clang: error:
            r"e:\s+(?:file://)?\S+\.kts?\b",  # kotlinc
            r"PHP\s+(?:Fatal|Parse)\s+error:",
            r"(?:FAILED|ERROR)\s+\S*(?:::|\.py\b|/)",  # pytest summary lines
            r"FAIL(?::|\s)\s*\S",  # Jest, go test, unittest
            r"---\s+FAIL:\s+\S",  # go test
            r"test\s+\S+\s+\.\.\.\s+FAILED\b",  # cargo test
            r"thread\s+'[^']*'\s+panicked\s+at\b",  # Rust
            r"\*\*\s+\([\w.]+\)",  # Elixir: ** (RuntimeError) ...
            r"Assertion\s+with\s+\S{1,4}\s+failed\b",  # ExUnit
            r"Failure/Error:",  # RSpec
            r"\[ERROR\]\s+\S",  # Maven
            r"FAILURE:\s+\S",  # Gradle
            r">\s+Task\s+\S+\s+FAILED\b",  # Gradle
            r"BUILD\s+FAIL(?:ED|URE)\b",  # Ant, Maven
            r"make(?:\[\d+\])?:\s+\*\*\*",  # make
            r"CMake\s+Error\b",
            r"The\s+following\s+tests\s+FAILED:",  # ctest
            r'Exception\s+in\s+thread\s+"[^"]*"\s+\S',  # Java
            r"Caused\s+by:\s+\S",  # Java
            r"Unhandled\s+exception\.\s+\S",  # .NET
            r"[^\s:]+:\d+:in\s+[`'][^']*'",  # Ruby: file:line:in 'method'
            r"npm\s+(?:ERR!|error)\s",
            r"Can't\s+locate\s+\S+\s+in\s+@INC",  # Perl
        ]
    )
)
_ERROR_TAIL_RE = re.compile(
    r":\s*(?:command not found|No such file or directory|Permission denied|not found$)"
    r"|undefined reference to [`']|Segmentation fault|Assertion [`'].*' failed"
)
_ERROR_CODE_RE = re.compile(
    r"(?<![\w\-])(?:(?:ERR|ERROR|E|FAIL|FATAL)[\-_](?:[A-Z]+[\-_])*\d{2,}[A-Z0-9]*"
    r"|ERR_[A-Z][A-Z0-9_]{2,})(?![\w\-])"
)
_FAILED_TEST_RE = re.compile(
    r"\s*(?:---\s+FAIL:\s+(\w+)"  # go test
    r"|test\s+(\S+)\s+\.\.\.\s+FAILED\b"  # cargo test
    r"|\d+\)\s+(test\s.*\([\w.]++\))\s*$)"  # ExUnit: "  1) test does x (MyApp.XTest)"
)


def _bound(text: str) -> str:
    text = text.strip()
    if len(text) <= _MAX_FACT:
        return text
    cut = text[:_MAX_FACT]
    space = cut.rfind(" ")
    return (cut[:space] if space >= _MAX_FACT * 3 // 4 else cut).rstrip()


def _error_line(line: str) -> str | None:
    """The error fact of one line (trimmed, bounded), or None when it is no error line."""
    head = line[:_LINE_HEAD].strip()
    if _EXC_LINE_RE.match(head) or _ERROR_LINE_RE.match(head) or _ERROR_TAIL_RE.search(head):
        return _bound(head)
    return None


def error_codes(line: str) -> list[tuple[int, str]]:
    """The ``ERR-``-style codes in a line's head (``ERR-26936``, ``ERROR_1042``, ``E-0077``,
    Node's ``ERR_REQUIRE_ESM``) with their positions: an error however the line reads."""
    return [(m.start(), m[0]) for m in _ERROR_CODE_RE.finditer(line[:_LINE_HEAD])]


def failed_test(line: str) -> str | None:
    """The test a Go (``--- FAIL: TestX``), Rust (``test x ... FAILED``) or ExUnit (``1) test
    does x (MyApp.XTest)``, without its number) failure line reports."""
    match = _FAILED_TEST_RE.match(line[:_LINE_HEAD])
    return None if match is None else _bound(match[1] or match[2] or match[3])
