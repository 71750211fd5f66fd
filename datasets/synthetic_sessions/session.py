"""The conversation under construction, and the filler rounds between a session's key moments.

``Session`` appends messages (tool calls get unique ids and their results follow in call order)
and keeps a size estimate so that ``filler`` can spend a token budget over a number of messages:
reading modules, grepping, checking logs and history, and, when verifying, running the suite.
"""

from __future__ import annotations

import difflib
import json
import random
from typing import Any

from .code import NOUNS, VERBS, Source, numbered, source_file
from .files import changelog, config_file, manifest, readme, test_file
from .output import git_log, grep, lint_clean, list_dir, service_log
from .project import Project, camel
from .runner_output import suite_run

CHARS_PER_TOKEN = 4.1
"""o200k tokens per character of JSON on this mix of code, logs and prose (only aims sizes)."""

Call = tuple[str, dict[str, Any], str]
"""A tool call: function name, arguments, and the output the tool returned."""

EXTRA_PATHS = (
    ".github/workflows/ci.yml",
    "docs/architecture.md",
    "docs/configuration.md",
    "scripts/release.sh",
    "Makefile",
    "Dockerfile",
    ".gitignore",
    ".env.example",
    "db/migrations/0001_init.sql",
    "db/migrations/0007_add_audit_columns.sql",
)
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class Session:
    """One conversation being built, with the repository files it can show."""

    def __init__(self, rng: random.Random, p: Project) -> None:
        self.rng, self.p = rng, p
        self.messages: list[dict[str, Any]] = []
        self.chars = 0
        self.main: Source = source_file(rng, p, p.main_path, lines=rng.randint(170, 360), main=True)
        self.test: Source = test_file(rng, p, lines=rng.randint(70, 200))
        self.files: dict[str, str] = {
            p.main_path: self.main.text,
            p.test_path: self.test.text,
            p.config_path: config_file(rng, p),
            p.manifest_path: manifest(rng, p),
            "README.md": readme(rng, p),
            "CHANGELOG.md": changelog(rng, p),
        }
        for path in p.other_paths:
            self.files[path] = source_file(rng, p, path, lines=rng.randint(90, 300)).text
        self.src, self.ext = p.main_path.rsplit("/", 1)[0], p.main_path.rsplit(".", 1)[1]
        names = {f"{noun}_{verb}" for noun in NOUNS for verb in VERBS}
        spare = rng.sample(sorted(names), 14)
        style = camel if p.language == "typescript" else str
        self.spare = [f"{self.src}/{style(name)}.{self.ext}" for name in spare]
        self.edits: list[tuple[str, str]] = []
        self.used: set[str] = set()

    def listing(self, under: str = "") -> str:
        """``list_dir`` output for the repository, or the part of it ``under`` a folder."""
        paths = [*self.files, *EXTRA_PATHS, *self.spare]
        return list_dir([path for path in paths if path.startswith(under)])

    def add(self, message: dict[str, Any]) -> None:
        """Append one message."""
        self.messages.append(message)
        self.chars += len(json.dumps(message, ensure_ascii=False))

    def tokens(self) -> int:
        """The estimated size so far, in tokens."""
        return int(self.chars / CHARS_PER_TOKEN)

    def turn(self, content: str | None, *calls: Call) -> None:
        """An assistant message making ``calls`` (parallel when several) and their results."""
        ids = ["call_" + "".join(self.rng.choices(_ALNUM, k=24)) for _ in calls]
        tool_calls = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for call_id, (name, args, _) in zip(ids, calls, strict=True)
        ]
        self.add({"role": "assistant", "content": content, "tool_calls": tool_calls})
        for call_id, (_, _, output) in zip(ids, calls, strict=True):
            self.add({"role": "tool", "tool_call_id": call_id, "content": output})

    def say(self, role: str, text: str) -> None:
        """A message with text only."""
        self.add({"role": role, "content": text})

    def read(self, path: str, start: int | None = None, end: int | None = None) -> Call:
        """``read_file`` of a whole file or of lines ``start``-``end``."""
        text = self.files[path]
        if start is None:
            return "read_file", {"path": path}, numbered(text)
        lines = text.splitlines()[start - 1 : end]
        args = {"path": path, "start_line": start, "end_line": end}
        return "read_file", args, numbered("\n".join(lines), start=start)

    def bash(self, command: str, output: str) -> Call:
        """A ``bash`` call."""
        return "bash", {"command": command}, output

    def grep(self, pattern: str) -> Call:
        """``grep`` over the repository files seen so far."""
        return "grep", {"pattern": pattern}, grep(self.files, pattern)

    def edit(self, path: str, old: str, new: str) -> Call:
        """``edit_file`` replacing ``old`` by ``new`` (recorded for ``git diff``)."""
        self.edits.append((old, new))
        args = {"path": path, "old_string": old, "new_string": new}
        counts = f"{old.count(chr(10)) + 1} lines -> {new.count(chr(10)) + 1} lines"
        return "edit_file", args, f"Edited {path}: replaced 1 occurrence ({counts})."


def _misc(s: Session, used: set[str]) -> tuple[str, Call] | None:
    """A small shell command not run yet: status, diff, blame, env, line counts."""
    p, rng = s.p, s.rng
    options: list[tuple[str, str, str]] = []
    if s.edits:
        old, new = s.edits[-1]
        diff = difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{p.main_path}", f"b/{p.main_path}", lineterm=""
        )
        options.append(("git diff", "Reviewing the change so far.", "\n".join(diff)))
        status = f"On branch fix/issue-{p.issue}\nChanges not staged for commit:\n\tmodified:   "
        options.append(("git status", "Checking the working tree.", status + p.main_path))
    start = max(1, rng.randint(1, len(s.main.text.splitlines()) - 30))
    blame = "\n".join(
        f"{rng.getrandbits(28):07x} ({rng.choice(('dana', 'lee', 'mo', 'kai'))} "
        f"2024-0{rng.randint(1, 5)}-{rng.randint(10, 28)} {start + i:>4}) {line}"
        for i, line in enumerate(s.main.text.splitlines()[start - 1 : start + 29])
    )
    options.append(
        (f"git blame -L {start},{start + 29} {p.main_path}", "Who touched this last?", blame)
    )
    env = [f"PORT={p.port}", "LOG_LEVEL=info", f"{p.package.upper()}_ENV=development"]
    options.append(("cat .env.example", "Checking the example environment.", "\n".join(env)))
    counts = "\n".join(f"{len(s.files[x].splitlines()):>5} {x}" for x in sorted(s.files)[:8])
    options.append(
        (f"wc -l {' '.join(sorted(s.files)[:8])}", "Sizes of the files involved.", counts)
    )
    fresh = [option for option in options if option[0] not in used]
    if not fresh:
        return None
    command, content, output = rng.choice(fresh)
    used.add(command)
    return content, s.bash(command, output or "(no output)")


def filler(s: Session, *, until: int, tokens: int, verify: bool) -> None:
    """Exploration (or, with ``verify``, verification) rounds until the conversation has about
    ``until`` messages, spending about ``tokens`` tokens on them."""
    p, rng = s.p, s.rng
    spent_before = s.tokens()
    pending = ["suite", "lint"] if verify else []
    caps = {"gitlog": 1, "logs": 2, "ls": 1}
    used = s.used
    previous = ""
    while len(s.messages) < until - 1:
        rounds_left = max(1.0, (until - len(s.messages)) / 2.4)
        goal = max(150.0, (tokens - (s.tokens() - spent_before)) / rounds_left)
        chars = goal * CHARS_PER_TOKEN
        if pending and rng.random() < 0.4:
            kind = pending.pop(0)
        elif goal > 1800:
            kind = rng.choice(("read", "read", "parallel", "parallel", "range", "logs"))
        elif goal > 600:
            kind = rng.choice(("read", "parallel", "range", "range", "grep", "gitlog", "logs"))
        else:
            kind = rng.choice(("grep", "grep", "gitlog", "ls", "range", "misc", "misc"))
        if kind == previous or caps.get(kind, 1) <= 0:
            kind = rng.choice(("range", "grep", "misc"))
        previous = kind
        if kind in caps:
            caps[kind] -= 1
        if kind in ("read", "parallel"):
            width = 1 if kind == "read" or len(s.spare) < 3 else rng.randint(2, 3)
            calls = []
            for _ in range(width):
                path = s.spare.pop() if s.spare else rng.choice(p.other_paths)
                lines = int(min(400, max(40, chars / width / 38)))
                s.files.setdefault(path, source_file(rng, p, path, lines=lines).text)
                calls.append(s.read(path))
            names = " and ".join(str(call[1]["path"]) for call in calls)
            content = rng.choice((None, f"Reading {names}.", f"Does {names} depend on {p.cls}?"))
            s.turn(content, *calls)
        elif kind == "range":
            path = rng.choice((p.main_path, p.test_path, *p.other_paths))
            total = len(s.files[path].splitlines())
            start = rng.randint(1, max(1, total - 40))
            end = min(total, start + int(max(20, chars / 40)))
            s.turn(rng.choice((None, f"Lines {start}-{end} of {path}.")), s.read(path, start, end))
        elif kind == "grep":
            pattern = rng.choice(
                (
                    p.cls,
                    p.config_key,
                    "TODO",
                    p.func,
                    p.name(f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}", exported=True),
                )
            )
            if pattern in used:
                pattern = p.name(f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}", exported=True)
            used.add(pattern)
            s.turn(rng.choice((None, f"Where else is {pattern} used?")), s.grep(pattern))
        elif kind == "gitlog":
            n = int(min(60, max(5, chars / 60)))
            s.turn(
                "Recent history, for context.",
                s.bash(f"git log --oneline -n {n}", git_log(rng, p, n)),
            )
        elif kind == "logs":
            n = int(min(220, max(10, chars / 125)))
            command = f"tail -n {n} logs/{p.package}.log"
            s.turn(
                "Checking the service log for the symptom.",
                s.bash(command, service_log(rng, p, n - 1)),
            )
        elif kind == "ls":
            s.turn(None, ("list_dir", {"path": s.src}, s.listing(s.src)))
        elif kind == "suite":
            tests = {p.test_path: len(s.test.lines)}
            for path in p.other_paths[:3]:
                tests[path.replace(s.src, s.src + "/tests", 1)] = rng.randint(4, 30)
            s.turn("Running the full suite.", s.bash(p.suite_cmd, suite_run(rng, p, tests)))
        elif kind == "lint":
            s.turn("And the linters.", s.bash(p.lint_cmd, lint_clean(rng, p)))
        else:
            picked = _misc(s, used)
            if picked is None:
                s.turn(None, s.grep(p.name(f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}")))
            else:
                s.turn(*picked)
    for kind in pending:
        if kind == "suite":
            s.turn(
                "Running the full suite.",
                s.bash(p.suite_cmd, suite_run(rng, p, {p.test_path: len(s.test.lines)})),
            )
        else:
            s.turn("And the linters.", s.bash(p.lint_cmd, lint_clean(rng, p)))
