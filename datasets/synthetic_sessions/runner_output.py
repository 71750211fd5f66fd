"""What test runners print in synthetic sessions: pytest, jest, ``go test`` and cargo.

``test_run`` is a run of the test module that fails (on the planted assertion or crash) or
passes; ``suite_run`` is the whole suite passing. The planted error text appears verbatim, so a
fact's exact string is where an agent would have seen it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import NamedTuple

from .code import Source
from .project import Project, camel, pascal


def workspace_root(p: Project) -> str:
    """Where the project is checked out on the agent's machine."""
    return f"/workspace/{p.repo.split('/')[1]}"


def _names(test: Source) -> list[str]:
    return list(test.lines)


def seconds(rng: random.Random) -> str:
    """A short run time as the runners print it, e.g. ``1.37``."""
    return f"{rng.randint(0, 3)}.{rng.randint(10, 99)}"


def _label(p: Project, name: str) -> str:
    if p.language == "python":
        return f"{p.test_path}::test_{name}"
    if p.language == "typescript":
        return f"{p.cls} › {name.replace('_', ' ')}"
    if p.language == "go":
        return f"Test{pascal(name)}"
    return name


def test_run(
    rng: random.Random,
    p: Project,
    test: Source,
    main: Source,
    *,
    failing: str | None,
    only: list[str] | None = None,
) -> str:
    """The project's test command on the test module (or ``only`` these tests); ``failing`` is
    test1, test2 or None."""
    names = only or _names(test)
    stop = names.index(failing) + 1 if failing and p.language == "python" else len(names)
    ran = names[:stop]
    test_line = test.lines.get(failing or "", 1) + 3
    main_line = main.lines.get(p.domain.func, 1) + 4
    crash = failing == p.test2
    error = p.crash_error if crash else p.assert_error
    runner = {"python": _pytest, "typescript": _jest, "go": _gotest, "rust": _cargo}[p.language]
    return runner(_Run(rng, p, ran, failing, error, test_line, main_line))


class _Run(NamedTuple):
    """One run of the test module, as every runner's renderer takes it."""

    rng: random.Random
    p: Project
    ran: list[str]
    failing: str | None
    error: str
    test_line: int
    main_line: int


def _pytest(run: _Run) -> str:
    rng, p, ran, failing, error, test_line, main_line = run
    dots = "".join("F" if n == failing else "." for n in ran)
    out = [
        "============================= test session starts ==============================",
        f"platform linux -- Python 3.11.{rng.randint(4, 9)}, pytest-8.{rng.randint(0, 3)}."
        f"{rng.randint(0, 2)}, pluggy-1.5.0",
        f"rootdir: {workspace_root(p)}",
        "configfile: pyproject.toml",
        "plugins: cov-5.0.0, timeout-2.3.1",
        f"collected {len(ran)} items",
        "",
        f"{p.test_path} {dots}{' ' * max(1, 50 - len(dots))}[100%]",
    ]
    if failing is None:
        out.append(f"{'=' * 30} {len(ran)} passed in {seconds(rng)}s {'=' * 30}")
        return "\n".join(out)
    kind = error.split(":", 1)[0]
    out += [
        "",
        "=================================== FAILURES ===================================",
        f"{'_' * 20} test_{failing} {'_' * 20}",
        "",
        f"subject = {p.cls}({p.field}={p.config_value}, {p.crash_field}=None, strict=0)",
        "",
        f"    def test_{failing}(subject: {p.cls}) -> None:",
    ]
    if failing == p.test2:
        out += [
            f"        subject.{p.crash_field} = None",
            f">       subject.{p.func}({rng.randint(5, 9)})",
            "",
            f"{p.test_path}:{test_line}: ",
            "_ " * 39,
            "",
            f"self = {p.cls}({p.field}={p.config_value}, {p.crash_field}=None, strict=0)",
            f"attempt = {rng.randint(5, 9)}",
            "",
            f"    def {p.func}(self, attempt: int) -> int:",
            f'        """Returns the {p.domain.module.replace("_", " ")} value for the given '
            'attempt."""',
            f"        value = compute_{p.domain.module}_value(attempt, self.{p.field})",
            f">       value = adjust_{p.domain.module}(value, self.{p.crash_field}."
            f"{p.crash_field})",
            f"E       {error}",
            "",
            f"{p.main_path}:{main_line}: {kind}",
        ]
    else:
        out += [
            f"        result = subject.{p.func}({rng.randint(5, 9)})",
            f'>       assert result <= {p.config_value}, f"..."',
            f"E       {error}",
            f"E       assert {p.got} <= {p.config_value}",
            "",
            f"{p.test_path}:{test_line}: {kind}",
        ]
    out += [
        "------------------------------ Captured log call -------------------------------",
        f"DEBUG    {p.package}.{p.domain.area}.{p.domain.module}:{p.domain.module}.py:{main_line}"
        f" {p.domain.func} exceeded {p.domain.field}",
        "=========================== short test summary info ============================",
        f"FAILED {_label(p, failing)} - {error}",
        "!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!",
        f"{'=' * 20} 1 failed, {len(ran) - 1} passed in {seconds(rng)}s {'=' * 20}",
    ]
    return "\n".join(out)


def _jest(run: _Run) -> str:
    rng, p, ran, failing, error, test_line, main_line = run
    status = "FAIL" if failing else "PASS"
    out = [f"> {p.package}@{p.version} test", f"> jest {p.test_path}", ""]
    out += [f" {status}  {p.test_path} ({seconds(rng)} s)", f"  {p.cls}"]
    for name in ran:
        mark = "✕" if name == failing else "✓"
        out.append(f"    {mark} {name.replace('_', ' ')} ({rng.randint(1, 14)} ms)")
    if failing:
        code = [
            f'      {test_line - 2} |   it("{failing.replace("_", " ")}", () => {{',
            f"      {test_line - 1} |     const result = subject.{p.func}(7);",
            f"    > {test_line} |     assert.ok(result <= {p.config_value}, `...`);",
            "         |            ^",
        ]
        if failing == p.test2:
            code = [
                f"      {main_line - 1} |     let value = compute{pascal(p.domain.module)}Value"
                f"(attempt, this.{p.field});",
                f"    > {main_line} |     if (this.{camel(p.crash_field)} != undefined) {{",
                "         |                  ^",
            ]
        where = p.main_path if failing == p.test2 else p.test_path
        line = main_line if failing == p.test2 else test_line
        out += [
            "",
            f"  ● {_label(p, failing)}",
            "",
            f"    {error}",
            "",
            *code,
            "",
            f"      at {'Object.<anonymous>' if where == p.test_path else p.cls + '.' + p.func} "
            f"({where}:{line}:{rng.randint(9, 30)})",
            "      at Promise.then.completed (node_modules/jest-circus/build/utils.js:298:28)",
            "      at new Promise (<anonymous>)",
            "      at callAsyncCircusFn (node_modules/jest-circus/build/utils.js:231:10)",
        ]
    failed = 1 if failing else 0
    out += [
        "",
        "Test Suites: 1 failed, 1 total" if failed else "Test Suites: 1 passed, 1 total",
        f"Tests:       {failed} failed, {len(ran) - failed} passed, {len(ran)} total"
        if failed
        else f"Tests:       {len(ran)} passed, {len(ran)} total",
        "Snapshots:   0 total",
        f"Time:        {seconds(rng)} s",
        f"Ran all test suites matching /{p.test_path.replace('/', chr(92) + '/')}/i.",
    ]
    return "\n".join(out)


def _gotest(run: _Run) -> str:
    rng, p, ran, failing, error, test_line, main_line = run
    pkg = f"github.com/{p.repo}/internal/{p.domain.area}"
    out: list[str] = []
    for name in ran:
        label = _label(p, name)
        out.append(f"=== RUN   {label}")
        if name == failing and failing == p.test2:
            out += [
                f"--- FAIL: {label} (0.00s)",
                f"{error} [recovered]",
                f"\t{error}",
                f"[signal SIGSEGV: segmentation violation code=0x1 addr=0x{rng.randint(8, 64):x} "
                f"pc=0x{rng.randint(0x400000, 0x6FFFFF):x}]",
                "",
                f"goroutine {rng.randint(6, 40)} [running]:",
                "testing.tRunner.func1.2({0x6b2f40, 0x8f1c30})",
                "\t/usr/local/go/src/testing/testing.go:1545 +0x238",
                f"{pkg}.(*{p.cls}).{p.func}(0xc000{rng.randint(100000, 999999)}, 0x7)",
                f"\t{workspace_root(p)}/{p.main_path}:{main_line} +0x{rng.randint(16, 255):x}",
                f"{pkg}.{label}(0xc000{rng.randint(100000, 999999)})",
                f"\t{workspace_root(p)}/{p.test_path}:{test_line} +0x{rng.randint(16, 255):x}",
                "testing.tRunner(0xc0001a2000, 0x6d5e88)",
                "\t/usr/local/go/src/testing/testing.go:1595 +0xff",
                f"FAIL\t{pkg}\t0.0{rng.randint(10, 99)}s",
            ]
            return "\n".join(out)
        if name == failing:
            out += [
                f"    {p.test_path.rsplit('/', 1)[1]}:{test_line}: {error}",
                f"--- FAIL: {label} (0.00s)",
            ]
        else:
            out.append(f"--- PASS: {label} (0.00s)")
    if failing:
        out += ["FAIL", f"FAIL\t{pkg}\t0.0{rng.randint(10, 99)}s", "FAIL"]
    else:
        out += ["PASS", f"ok  \t{pkg}\t0.0{rng.randint(10, 99)}s"]
    return "\n".join(out)


def _cargo(run: _Run) -> str:
    rng, p, ran, failing, error, test_line, main_line = run
    binary = p.test_path.rsplit("/", 1)[1].removesuffix(".rs")
    out = [
        f"   Compiling {p.package} v{p.version} ({workspace_root(p)})",
        f"    Finished `test` profile [unoptimized + debuginfo] target(s) in {seconds(rng)}s",
        f"     Running {p.test_path} (target/debug/deps/{binary}-{rng.getrandbits(64):016x})",
        "",
        f"running {len(ran)} test{'s' if len(ran) != 1 else ''}",
    ]
    out += [f"test {n} ... {'FAILED' if n == failing else 'ok'}" for n in ran]
    if failing is None:
        out += [
            "",
            f"test result: ok. {len(ran)} passed; 0 failed; 0 ignored; 0 measured; "
            f"0 filtered out; finished in 0.0{rng.randint(1, 9)}s",
        ]
        return "\n".join(out)
    where = f"{p.main_path}:{main_line}" if failing == p.test2 else f"{p.test_path}:{test_line}"
    out += [
        "",
        "failures:",
        "",
        f"---- {failing} stdout ----",
        f"thread '{failing}' panicked at {where}:{rng.randint(5, 30)}:",
        error,
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        "",
        "",
        "failures:",
        f"    {failing}",
        "",
        f"test result: FAILED. {len(ran) - 1} passed; 1 failed; 0 ignored; 0 measured; "
        f"0 filtered out; finished in 0.0{rng.randint(1, 9)}s",
        "",
        f"error: test failed, to rerun pass `--test {binary}`",
    ]
    return "\n".join(out)


def suite_run(rng: random.Random, p: Project, modules: Mapping[str, int]) -> str:
    """The whole suite passing, ``modules`` mapping test files to their number of tests."""
    total = sum(modules.values())
    out: list[str] = []
    if p.language == "python":
        out.append(f"collected {total} items")
        out += [f"{path} {'.' * n}" for path, n in modules.items()]
        out += [
            "",
            "=============================== warnings summary ===============================",
            f"{p.test_path}:{rng.randint(1, 30)}",
            "  DeprecationWarning: datetime.datetime.utcnow() is deprecated",
            "",
            f"{total} passed, 1 warning in {seconds(rng)}s",
        ]
    elif p.language == "typescript":
        out += [f"PASS {path} ({seconds(rng)} s)" for path in modules]
        out += [f"Test Suites: {len(modules)} passed, {len(modules)} total"]
        out += [f"Tests:       {total} passed, {total} total", f"Time:        {seconds(rng)} s"]
    elif p.language == "go":
        for path in modules:
            out.append(
                f"ok  \tgithub.com/{p.repo}/{path.rsplit('/', 1)[0]}\t0.{rng.randint(10, 99)}s"
            )
    else:
        for path, n in modules.items():
            out += [f"     Running {path}", "", f"running {n} tests"]
            out += [f"test result: ok. {n} passed; 0 failed; 0 ignored; finished in 0.01s", ""]
    return "\n".join(out)
