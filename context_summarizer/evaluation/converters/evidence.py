"""What a coding run's own record says, as gold facts: the files and definitions its final patch
changed, the tests that failed and the error lines its outputs showed, and the commands that
reproduce the bug and run the tests. Each rule is the converters' own (not the fact ledger's
extractor), so a strategy that carries the ledger is not scored by the ledger's own rules."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from ..dataset import GoldFact
from .cases import _unique

_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_HUNK = re.compile(r"^@@ [^@]* @@ ?(.*)$")
_DEFINITION = re.compile(
    r"^\s*(?:(?:pub(?:\(\w+\))?|export|public|private|protected|static|async|abstract|final)\s+)*"
    r"(?:def|defp|defmodule|class|function|func|fn|struct|enum|trait|interface|module)\s+"
    r"(?:\([^)]*\)\s*)?([A-Za-z_][\w.]*[!?]?)"
)
_TEST_LINE = re.compile(
    r"^(?:(?:FAILED|ERROR)\s+(\S+::\S+|\S*test\S*\.py)(?:\s|$)|(\S+::\S+)\s+(?:FAILED|ERROR)\b)"
)
_UNITTEST_LINE = re.compile(r"^(?:FAIL|ERROR): (test\w*) \([\w.]+\)")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)\b.*")
_PYTEST_E = re.compile(r"^E\s{2,}((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*)")
_FRAME = re.compile(r'^\s+File "[^"]+", line \d+')
_SEGMENT_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")
_REDIRECT = re.compile(r"\s+(?:\d?>>?&?\s*\S+|<\s*\S+)")
_REPRODUCE = re.compile(r"python3?\s+\S*reproduc\w*\.py\b.*")
_TEST_COMMAND = re.compile(
    r"(?:\S*python3?\s+-m\s+pytest|pytest|py\.test|\S*python3?\s+\S*runtests\.py"
    r"|\S*runtests\.py|\S*bin/test|tox|nox)(?:\s.*)?"
)
_ENV_PREFIX = re.compile(r"(?:[A-Za-z_]\w*=\S*\s+)+")
_CHECK_COMMAND = re.compile(
    r"(?:\S*python3?\s+-m\s+(?:pytest|unittest|mypy|ruff|tox)|pytest|py\.test|tox|nox"
    r"|\S*runtests\.py|go\s+(?:test|build|vet)|cargo\s+(?:test|build|check|clippy|nextest)"
    r"|(?:npm|pnpm|yarn|bun)\s+(?:test|run\s+\S+|build|lint)|npx\s+(?:jest|vitest|tsc|eslint)"
    r"|jest|vitest|tsc|eslint|ruff|mypy|mix\s+(?:test|compile|credo|format|dialyzer)"
    r"|\.?/?mvnw?|\.?/?gradlew?|g?make|ctest|dotnet\s+(?:test|build)|bundle\s+exec"
    r"|rspec|rake|phpunit|swift\s+(?:test|build)|flutter\s+test|dart\s+test)(?:\s.*)?"
)


def patch_files(patch: str) -> list[str]:
    """The files a unified diff changes, in order (the ``b/`` side of ``diff --git`` lines)."""
    return _unique(match.group(2) for match in _DIFF_FILE.finditer(patch.replace("\r\n", "\n")))


def patch_identifiers(patch: str) -> list[str]:
    """The definitions a unified diff changes, in order: the function or class each hunk header
    names as its context, and those its added or removed lines define (``def``, ``class``,
    ``func``, ``fn``, ``function``, ``defmodule``, ...)."""
    found: list[str] = []
    for line in patch.replace("\r\n", "\n").split("\n"):
        hunk = _HUNK.match(line)
        if hunk is not None:
            text = hunk.group(1)
        elif line[:1] in "+-" and not line.startswith(("+++", "---")):
            text = line[1:]
        else:
            continue
        definition = _DEFINITION.match(text[:300])
        if definition is not None:
            found.append(definition.group(1))
    return _unique(found)


def failing_tests(text: str) -> list[str]:
    """Tests reported as failed or erroring, in order: pytest's ids (``FAILED path::test``,
    ``path::test ERROR``) and unittest's names (``FAIL: test_x (module.Class)`` as ``test_x``)."""
    found = []
    for line in text.replace("\r\n", "\n").split("\n"):
        head = line.strip()[:500]
        match = _TEST_LINE.match(head)
        if match:
            found.append(match.group(1) or match.group(2))
        elif unittest := _UNITTEST_LINE.match(head):
            found.append(unittest.group(1))
    return _unique(found)


def error_lines(text: str) -> list[str]:
    """The exception line ending each Python traceback (or ``File "...", line N`` report, as
    for a ``SyntaxError``), and pytest's ``E   XError: ...`` lines, in order."""
    found: list[str] = []
    in_traceback = False
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if line.startswith("Traceback (most recent call last)") or _FRAME.match(line[:500]):
            in_traceback = True
            continue
        if in_traceback and line and not line[0].isspace():
            if _EXCEPTION.match(line[:500]):
                found.append(line.strip()[:300])
            in_traceback = False
            continue
        match = _PYTEST_E.match(line[:500])
        if match:
            found.append(match.group(1).strip()[:300])
    return _unique(found)


def plain_command(command: str, limit: int = 200) -> str:
    """A command's first line, its redirections (``2>&1``, ``> out.txt``) removed, cut to
    ``limit`` characters at a space where it is longer."""
    lines = command.strip().splitlines()
    text = _REDIRECT.sub("", lines[0] if lines else "").strip()
    if len(text) > limit:
        cut = text[:limit]
        text = cut[: cut.rfind(" ")] if " " in cut else cut
    return text.rstrip()


def _segments(command_lines: Iterable[str]) -> Iterator[str]:
    for line in command_lines:
        for segment in _SEGMENT_SPLIT.split(line.strip()[:500]):
            segment = _REDIRECT.sub("", segment).strip()
            if segment:
                yield segment


def key_commands(command_lines: Iterable[str]) -> list[str]:
    """The first command that runs a reproduce script (``python reproduce_bug.py``) and the
    first that runs tests (``pytest ...``, ``tests/runtests.py ...``, ``bin/test ...``), each a
    single segment of its line (split at ``&&``, ``||``, ``;`` and ``|``, redirections off)."""
    reproduce: str | None = None
    tests: str | None = None
    for segment in _segments(command_lines):
        if reproduce is None and _REPRODUCE.fullmatch(segment):
            reproduce = segment
        elif tests is None and _TEST_COMMAND.fullmatch(segment):
            tests = segment
    return [command for command in (reproduce, tests) if command is not None]


def check_commands(command_lines: Iterable[str]) -> list[str]:
    """Every distinct command that tests, builds or lints, in any toolchain (``pytest``,
    ``go test``, ``cargo build``, ``npm test``, ``mix test``, ``mvn``, ``gradle``, ``make``,
    ``dotnet test``, ``bundle exec rspec``, ...): each a single segment of its line, leading
    ``VAR=x`` assignments and redirections off."""
    found = []
    for segment in _segments(command_lines):
        segment = _ENV_PREFIX.sub("", segment, count=1) if _ENV_PREFIX.match(segment) else segment
        if _CHECK_COMMAND.fullmatch(segment):
            found.append(plain_command(segment))
    return _unique(found)


def numbered(prefix: str, kind: str, texts: Iterable[str]) -> list[GoldFact]:
    """Gold facts ``<prefix>-1``, ``<prefix>-2``, ... of one kind; a path with ``/`` also
    matches with ``\\`` separators."""
    return [
        GoldFact(
            id=f"{prefix}-{n}",
            text=text,
            kind=kind,
            aliases=[text.replace("/", "\\")] if kind == "path" and "/" in text else [],
        )
        for n, text in enumerate(texts, start=1)
    ]


def run_facts(patch: str, observed: str, command_lines: Iterable[str], said: str) -> list[GoldFact]:
    """A coding run's gold facts: the patch's files, the definitions it changed that the
    conversation (``said``) names, the failing tests and error lines in ``observed`` (what the
    tools and the task said), and the key commands among ``command_lines``."""
    identifiers = [
        name
        for name in patch_identifiers(patch)
        if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", said)
    ]
    return [
        *numbered("patch-file", "path", patch_files(patch)),
        *numbered("patch-identifier", "identifier", identifiers),
        *numbered("test", "test", failing_tests(observed)),
        *numbered("error", "error", error_lines(observed)),
        *numbered("command", "command", key_commands(command_lines)),
    ]
