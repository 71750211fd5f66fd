"""How much a fact matters to the agent that goes on (``importance``: 0 is the most), from its
kind and what the agent did with it. The ledger keeps the most important facts and gives up the
least important first.

0. what the work is about: a file the agent **edited**, a command that **failed** (a test,
   build or other non-exploring command), an error still **unresolved**, what the user asked
   (``constraint``);
1. how it is checked: a test, build or lint command run (``pytest``, ``go test``, ``cargo
   build``, ``npm test``, ``mix test``, ``make``, ...), a test id (failing or not: a run can
   name hundreds), an error seen outside a run, an id passed to a tool, a commit;
2. what it looked at and got past: a file **read**, another command run, an error since
   **resolved**, an identifier, a URL;
3. the rest: a path only mentioned, an exploring command (``ls``,
   ``grep``, ``cat``, ``git status``, ...), a quantity.
"""

from __future__ import annotations

from .fact import Fact

_CHECK_WORDS = """
pytest tox nox jest vitest mocha rspec phpunit ctest make gmake mvn mvnw gradle gradlew tsc eslint
ruff mypy pyright flake8 pylint black prettier rake prove
"""
_CHECK_TOOLS = frozenset(_CHECK_WORDS.split())
_CHECK_SUBCOMMANDS = {
    "cargo": frozenset({"test", "build", "check", "clippy", "nextest", "run", "fmt"}),
    "go": frozenset({"test", "build", "vet", "run"}),
    "npm": frozenset({"test", "run", "build", "ci"}),
    "pnpm": frozenset({"test", "run", "build", "lint"}),
    "yarn": frozenset({"test", "run", "build", "lint"}),
    "bun": frozenset({"test", "run"}),
    "npx": frozenset({"jest", "vitest", "tsc", "eslint", "playwright", "mocha"}),
    "mix": frozenset({"test", "compile", "credo", "format", "dialyzer"}),
    "dotnet": frozenset({"test", "build"}),
    "bundle": frozenset({"exec"}),
    "swift": frozenset({"test", "build"}),
    "flutter": frozenset({"test"}),
    "dart": frozenset({"test"}),
    "deno": frozenset({"test", "lint", "check"}),
}
_EXPLORING_WORDS = """
ls cat head tail less more grep rg find fd sed awk echo printf pwd cd wc nl tree which file stat
diff du df env export sleep true source open search_dir search_file find_file goto scroll_up
scroll_down bd
"""
_EXPLORING = frozenset(_EXPLORING_WORDS.split())
_GIT_READS = frozenset({"status", "log", "diff", "show", "branch", "blame", "rev-parse"})


def _words(command: str) -> list[str]:
    """The words of a command's first segment that is not ``cd``/``source``/``VAR=x``."""
    for segment in command.replace("||", "&&").replace(";", "&&").split("&&"):
        words = [w for w in segment.split() if "=" not in w or w.startswith(("-", "'", '"'))]
        if words and words[0] not in ("cd", "source", "export", "time", "timeout", "sudo"):
            return [w.rsplit("/", 1)[-1] if i == 0 else w for i, w in enumerate(words)]
    return []


def command_family(command: str) -> str:
    """What two runs of "the same check" share: the tool and its first two arguments that are
    not options (``-m x`` counts as one), in the command's first segment that is not ``cd``,
    ``source``, ``VAR=x``: ``pytest tests/a.py -x`` and ``pytest -q tests/a.py`` are both
    ``pytest tests/a.py``; ``python -m pytest -x tests/b.py`` is ``python -m pytest
    tests/b.py``; ``cd /repo && make test`` is ``make test``."""
    words = _words(command)
    kept = words[:1]
    rest = iter(words[1:])
    for word in rest:
        if word == "-m":
            kept += [word, next(rest, "")]
        elif not word.startswith("-"):
            kept.append(word)
        if len([w for w in kept[1:] if w != "-m"]) >= 2:
            break
    return " ".join(kept)


def is_check(command: str) -> bool:
    """Whether a command tests, builds or lints (``python -m pytest``, ``./gradlew test``,
    ``cargo clippy``, ``mix test``, ``python reproduce.py``, ...)."""
    words = _words(command)
    if not words:
        return False
    tool, rest = words[0], words[1:]
    if tool in _CHECK_TOOLS:
        return True
    if tool in ("python", "python3", "py", "uv", "poetry") and rest:
        if rest[0] in ("run",) and len(rest) > 1:
            return is_check(" ".join(rest[1:]))
        if rest[0] == "-m" and len(rest) > 1:
            return rest[1] in ("pytest", "unittest", "mypy", "ruff", "tox", "django")
        script = rest[0].rsplit("/", 1)[-1]
        return script.endswith(".py") and ("test" in script or "reproduc" in script)
    return rest[:1] != [] and rest[0] in _CHECK_SUBCOMMANDS.get(tool, frozenset())


def is_exploring(command: str) -> bool:
    """Whether a command only looks around (``ls``, ``grep``, ``cat``, ``git status``, ...)."""
    words = _words(command)
    if not words:
        return True
    if words[0] == "git":
        return len(words) < 2 or words[1] in _GIT_READS
    return words[0] in _EXPLORING


def importance(fact: Fact) -> int:
    """The fact's tier: 0 (kept first) to 3 (given up first)."""
    kind, role = fact.kind, fact.role
    if kind == "command":
        if role is None or is_exploring(fact.text):
            return 3
        if role == "failed":
            return 0
        return 1 if is_check(fact.text) else 2
    if kind == "constraint" or role in ("edited", "unresolved"):
        return 0
    if kind in ("test", "commit") or role == "argument" or (kind == "error" and role is None):
        return 1
    if role in ("read", "resolved") or kind in ("identifier", "url"):
        return 2
    return 3
