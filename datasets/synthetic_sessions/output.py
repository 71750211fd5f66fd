"""Tool outputs of synthetic sessions: compiler errors, lint, grep, listings, history, logs.

Each renderer prints what the real tool prints for the project's language (mypy, tsc,
``go vet``, rustc; ``grep -rn``, ``ls``, ``git log``), with the project's planted error text
verbatim, so a fact's exact string is where an agent would have seen it. Test runs are in
``runner_output``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from .project import Project
from .runner_output import seconds, workspace_root


def compile_failure(rng: random.Random, p: Project) -> str:
    """The project's type checker or compiler rejecting the first attempt."""
    line = p.compile_line
    if p.language == "python":
        return "\n".join(
            [
                p.compile_error,
                f'{p.main_path}:{line + rng.randint(3, 20)}: note: Revealed type is "float"',
                f"Found 1 error in 1 file (checked {rng.randint(30, 90)} source files)",
            ]
        )
    if p.language == "typescript":
        return "\n".join([p.compile_error, "", f"Found 1 error in {p.main_path}:{line}", ""])
    if p.language == "go":
        return "\n".join([f"# github.com/{p.repo}/internal/{p.domain.area}", p.compile_error])
    col = rng.randint(14, 30)
    return "\n".join(
        [
            f"    Checking {p.package} v{p.version} ({workspace_root(p)})",
            p.compile_error,
            f"  --> {p.main_path}:{line}:{col}",
            "   |",
            f"{line} |         self.{p.func}(elapsed.as_secs_f64())",
            f"   |              {'-' * len(p.func)} ^^^^^^^^^^^^^^^^^^^^^^ expected `i64`, "
            "found `f64`",
            "   |              |",
            "   |              arguments to this method are incorrect",
            "   |",
            "note: method defined here",
            f"  --> {p.main_path}:{max(1, line - 40)}:12",
            "",
            "For more information about this error, try `rustc --explain E0308`.",
            f"error: could not compile `{p.package}` (lib) due to 1 previous error",
        ]
    )


def lint_clean(rng: random.Random, p: Project) -> str:
    """The lint/type-check command succeeding."""
    return {
        "python": f"Success: no issues found in {rng.randint(30, 90)} source files",
        "typescript": "",
        "go": "",
        "rust": f"    Checking {p.package} v{p.version} ({workspace_root(p)})\n"
        "    Finished `dev` profile "
        f"[unoptimized + debuginfo] target(s) in {seconds(rng)}s",
    }[p.language] or "(no output)"


def grep(files: Mapping[str, str], needle: str, *, limit: int = 60) -> str:
    """``grep -rn needle`` over ``files`` (path → text), in path order."""
    hits: list[str] = []
    for path in sorted(files):
        for number, line in enumerate(files[path].splitlines(), start=1):
            if needle in line:
                hits.append(f"{path}:{number}:{line}")
    if len(hits) > limit:
        hits = [*hits[:limit], f"... {len(hits) - limit} more matches"]
    return "\n".join(hits) or "(no matches)"


def list_dir(paths: list[str]) -> str:
    """A recursive listing of ``paths``, sorted, as ``find . -type f`` prints it."""
    return "\n".join(f"./{path}" for path in sorted(set(paths)))


def git_log(rng: random.Random, p: Project, count: int) -> str:
    """``git log --oneline`` of recent commits in the project's area."""
    verbs = ("fix", "feat", "refactor", "chore", "test", "docs", "perf")
    topics = (
        f"tidy {p.domain.module.replace('_', ' ')} helpers",
        f"bump dependencies ({rng.randint(2, 9)} packages)",
        f"log {p.domain.field} on startup",
        "cache build artefacts in CI",
        f"add metrics for {p.domain.module}",
        f"document {p.config_key}",
        "release prep",
    )
    lines = [
        f"{rng.getrandbits(28):07x} {rng.choice(verbs)}({p.domain.area}): {rng.choice(topics)}"
        f" (#{rng.randint(100, p.issue)})"
        for _ in range(count)
    ]
    return "\n".join(lines)


def service_log(rng: random.Random, p: Project, count: int) -> str:
    """The tail of the service log, including the listen line and the symptom's warnings."""
    day, hour = rng.randint(1, 28), rng.randint(0, 22)
    out = [f"2024-06-{day:02d}T{hour:02d}:00:00.004Z INFO  server listening on 0.0.0.0:{p.port}"]
    messages = (
        f"WARN  {p.domain.module}: {p.domain.func} exceeded {p.domain.field}",
        "INFO  request completed status=200",
        "INFO  request completed status=200",
        "INFO  request completed status=204",
        "WARN  upstream slow response",
        "ERROR request failed status=401",
        "INFO  health check ok",
        f"DEBUG {p.domain.module}: {p.config_key}={p.config_value}",
    )
    for i in range(count):
        minute, second, ms = i // 60 % 60, i % 60, rng.randint(0, 999)
        text = rng.choice(messages)
        rid = f"req_{rng.getrandbits(40):010x}"
        duration = rng.randint(2, 4000)
        out.append(
            f"2024-06-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{ms:03d}Z {text} "
            f"request_id={rid} duration_ms={duration}"
        )
    return "\n".join(out)
