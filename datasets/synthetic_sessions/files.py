"""Test modules, configuration files and READMEs for synthetic sessions.

Each renderer returns text that plants the project's names where a real repository would have them:
the failing tests and their assertion message in the test module, the port and the domain's
setting in the configuration, the commands and layout in the README.
"""

from __future__ import annotations

import random

from .code import LOCALS, NOUNS, VERBS, Source
from .project import Project, camel, pascal


def _message(project: Project, var: str) -> tuple[str, list[str]]:
    """The failing assertion's message as a format string of the language, and its arguments."""
    lang = project.language
    if lang == "python":
        holder = "{" + var + "}"
    elif lang == "typescript":
        holder = "${" + var + "}"
    else:
        holder = "%d" if lang == "go" else "{}"
    text = project.domain.message.format(got=holder, value=project.config_value)
    return text, ([] if lang in ("python", "typescript") else [var])


def test_file(rng: random.Random, project: Project, *, lines: int) -> Source:
    """The test module holding the two failing tests among about ``lines`` lines of others."""
    lang, d, value = project.language, project.domain, project.config_value
    cls, func, field = d.cls, project.func, project.field
    crash = {"typescript": camel(d.crash_field), "go": camel(d.crash_field)}.get(
        lang, d.crash_field
    )
    attempt = rng.randint(5, 9)
    message, args = _message(project, "result")
    tail = "".join(f", {a}" for a in args)
    if lang == "python":
        head = [
            f'"""Tests for {project.package}.{d.area}.{d.module}."""',
            "",
            "from __future__ import annotations",
            "",
            "import pytest",
            "",
            f"from {project.package}.{d.area}.{d.module} import {cls}",
            "",
            "",
            "@pytest.fixture",
            f"def subject() -> {cls}:",
            f"    return {cls}({field}={value})",
        ]
        check = [
            f"    result = subject.{func}({attempt})",
            f'    assert result <= {value}, f"{message}"',
        ]
        crash_body = [f"    subject.{crash} = None", f"    subject.{func}({attempt})"]

        def case(name: str, body: list[str]) -> list[str]:
            return ["", "", f"def test_{name}(subject: {cls}) -> None:", *body]

        close: list[str] = []
    elif lang == "typescript":
        head = [
            'import assert from "node:assert";',
            f'import {{ {cls} }} from "./{camel(d.module)}";',
            "",
            f'describe("{cls}", () => {{',
            f"  let subject: {cls};",
            "",
            "  beforeEach(() => {",
            f"    subject = new {cls}({{ {field}: {value} }});",
            "  });",
        ]
        check = [
            f"    const result = subject.{func}({attempt});",
            f"    assert.ok(result <= {value}, `{message}`);",
        ]
        crash_body = [
            f"    (subject as any).{crash} = undefined;",
            f"    subject.{func}({attempt});",
        ]

        def case(name: str, body: list[str]) -> list[str]:
            return ["", f'  it("{name.replace("_", " ")}", () => {{', *body, "  });"]

        close = ["});"]
    elif lang == "go":
        head = [f"package {d.area}", "", 'import "testing"']
        new = f"New{cls}(Config{{{pascal(d.config_key)}: {value}}})"
        check = [
            f"	p := {new}",
            f"	result := p.{func}({attempt})",
            f"	if result > {value} {{",
            f'		t.Errorf("{message}"{tail})',
            "	}",
        ]
        crash_body = [f"	p := {new}", f"	p.{crash} = nil", f"	p.{func}({attempt})"]

        def case(name: str, body: list[str]) -> list[str]:
            return ["", f"func Test{pascal(name)}(t *testing.T) {{", *body, "}"]

        close = []
    else:
        head = [f"use {project.package}::{d.area}::{d.module}::{cls};"]
        new = f"{cls} {{ {field}: {value}, ..Default::default() }}"
        check = [
            f"    let subject = {new};",
            f"    let result = subject.{func}({attempt});",
            f'    assert!(result <= {value}, "{message}"{tail});',
        ]
        crash_body = [
            f"    let subject = {cls} {{ {crash}: None, ..Default::default() }};",
            f"    subject.{func}({attempt}).unwrap();",
        ]

        def case(name: str, body: list[str]) -> list[str]:
            return ["", "#[test]", f"fn {name}() {{", *body, "}"]

        close = []
    out = list(head)
    positions: dict[str, int] = {}
    names = [f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}" for _ in range(60)]
    special = {rng.randint(1, 4): (d.test1, check), rng.randint(6, 9): (d.test2, crash_body)}
    for index, name in enumerate(names):
        if len(out) >= lines and index > 9:
            break
        name, body = special.get(index, (name, []))
        if not body:
            body = _filler_test(rng, lang, cls)
        positions[name] = len(out) + 2
        out += case(name, body)
    return Source("\n".join(out + close) + "\n", positions)


def _filler_test(rng: random.Random, lang: str, cls: str) -> list[str]:
    fn = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
    var, n, k = rng.choice(LOCALS), rng.randint(0, 64), rng.randint(0, 4096)
    if lang == "python":
        return [f"    {var} = subject.{fn}({n})", f"    assert {var} == {k}"]
    if lang == "typescript":
        return [
            f"    const {camel(var)} = subject.{camel(fn)}({n});",
            f"    expect({camel(var)}).toBe({k});",
        ]
    if lang == "go":
        return [
            f"\tp := New{cls}(Config{{}})",
            f"\tif got := p.{pascal(fn)}({n}); got != {k} {{",
            f'\t\tt.Fatalf("{fn}: got %d, want {k}", got)',
            "\t}",
        ]
    return [f"    let subject = {cls}::default();", f"    assert_eq!(subject.{fn}({n}), {k});"]


def config_file(rng: random.Random, project: Project) -> str:
    """The configuration file holding the port and the domain's setting."""
    d = project.domain
    extra = {
        k: rng.randint(2, 900)
        for k in rng.sample(
            (
                "pool_size",
                "queue_depth",
                "batch_size",
                "flush_interval_ms",
                "idle_timeout_s",
                "max_body_kb",
                "shutdown_grace_s",
                "worker_count",
                "read_timeout_ms",
            ),
            6,
        )
    }
    sections: dict[str, dict[str, object]] = {
        "server": {"host": '"0.0.0.0"', "port": project.port, **dict(list(extra.items())[:3])},
        d.area: {d.config_key: project.config_value, **dict(list(extra.items())[3:])},
        "logging": {"level": '"info"', "format": '"json"'},
        "metrics": {"enabled": "true", "namespace": f'"{project.package}"'},
    }
    out: list[str] = []
    if project.config_path.endswith(".json"):
        for name, values in sections.items():
            out.append(f'  "{name}": {{')
            items = [f'    "{camel(k)}": {v}' for k, v in values.items()]
            out.append(",\n".join(items))
            out.append("  },")
        out[-1] = "  }"
        return "{\n" + "\n".join(out) + "\n}\n"
    for name, values in sections.items():
        if project.config_path.endswith(".yaml"):
            out.append(f"{name}:")
            out += [f"  {k}: {str(v).strip(chr(34))}" for k, v in values.items()]
        else:
            out.append(f"[{name}]")
            out += [f"{k} = {v}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


def readme(rng: random.Random, project: Project) -> str:
    """The repository README: what it is, how to run it, where things live."""
    d = project.domain
    product = project.repo.split("/")[1]
    modules = "\n".join(
        f"- `{p}`: {rng.choice(VERBS)}s {rng.choice(NOUNS)}" for p in project.other_paths
    )
    return "\n".join(
        [
            f"# {product}",
            "",
            f"{product} is the {d.area} service of {project.repo.split('/')[0]}. It is written in "
            f"{project.lang_label} and deployed as a single container.",
            "",
            "## Development",
            "",
            "```",
            project.suite_cmd,
            project.lint_cmd,
            "```",
            "",
            f"The dev server listens on port {project.port}; set `PORT` to override it.",
            "",
            "## Layout",
            "",
            f"- `{project.main_path}`: {d.module.replace('_', ' ')} ({d.cls})",
            modules,
            "",
            "## Configuration",
            "",
            f"Settings live in `{project.config_path}` and can be overridden by environment "
            f"variables (`{project.package.upper()}_<SECTION>_<KEY>`).",
            "",
            "## Releasing",
            "",
            f"Bump the version in `{project.manifest_path}`, add an entry to CHANGELOG.md under "
            "'Unreleased', and tag the commit.",
            "",
        ]
    )


def manifest(rng: random.Random, project: Project) -> str:
    """The package manifest (pyproject.toml, package.json, go.mod or Cargo.toml)."""
    name, version = project.repo.split("/")[1], project.version
    floor = project.runtime_version
    if project.language == "python":
        deps = rng.sample(("httpx>=0.27", "pydantic>=2.6", "structlog>=24.1", "tenacity>=8.2"), 3)
        return "\n".join(
            [
                "[project]",
                f'name = "{name}"',
                f'version = "{version}"',
                f'requires-python = ">={floor}"',
                "dependencies = [",
                *(f'    "{d}",' for d in deps),
                "]",
                "",
                "[tool.pytest.ini_options]",
                'testpaths = ["tests"]',
                "",
            ]
        )
    if project.language == "typescript":
        return "\n".join(
            [
                "{",
                f'  "name": "{project.package}",',
                f'  "version": "{version}",',
                f'  "engines": {{ "node": ">={floor}" }},',
                '  "scripts": { "test": "jest", "build": "tsc -p .", "lint": "eslint src" },',
                '  "devDependencies": { "jest": "^29.7.0", "ts-jest": "^29.1.2" }',
                "}",
                "",
            ]
        )
    if project.language == "go":
        return "\n".join(
            [
                f"module github.com/{project.repo}",
                "",
                f"go {floor}",
                "",
                "require (",
                "\tgithub.com/prometheus/client_golang v1.19.0",
                "\tgopkg.in/yaml.v3 v3.0.1",
                ")",
                "",
            ]
        )
    return "\n".join(
        [
            "[package]",
            f'name = "{project.package}"',
            f'version = "{version}"',
            'edition = "2021"',
            f'rust-version = "{floor}"',
            "",
            "[dependencies]",
            'serde = { version = "1", features = ["derive"] }',
            'tracing = "0.1"',
            "",
        ]
    )


def changelog(rng: random.Random, project: Project) -> str:
    """CHANGELOG.md with an empty 'Unreleased' section and a few releases."""
    out = ["# Changelog", "", "## Unreleased", ""]
    major, minor, patch = (int(x) for x in project.version.split("."))
    for k in range(1, 5):
        out += [f"## {major}.{minor}.{max(0, patch - k)} - 2024-0{rng.randint(1, 5)}-1{k}", ""]
        out += [
            f"- {rng.choice(VERBS).capitalize()} {rng.choice(NOUNS)} handling "
            f"(#{rng.randint(100, 4000)})"
            for _ in range(rng.randint(1, 4))
        ]
        out.append("")
    return "\n".join(out)
