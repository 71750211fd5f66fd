"""Plausible source files for synthetic sessions, from a tiny language-neutral IR.

Statements are tuples (``("let", var, expr)``, ``("if", cond, body)``, ...) whose expressions
use snake_case names, ``@field`` for the receiver's fields, ``&&``/``||``/``!`` and ``none``;
``render_function`` spells them in Python, TypeScript, Go or Rust. The code is meant to read like
a real module in a tool output, not to compile.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from .project import Project, camel, pascal

Stmt = tuple[Any, ...]

_TYPES = {
    "int": ("int", "number", "int", "i64"),
    "float": ("float", "number", "float64", "f64"),
    "str": ("str", "string", "string", "String"),
    "bool": ("bool", "boolean", "bool", "bool"),
    "list": ("list[str]", "string[]", "[]string", "Vec<String>"),
    "map": ("dict[str, int]", "Record<string, number>", "map[string]int", "HashMap<String, i64>"),
}
_INDEX = {"python": 0, "typescript": 1, "go": 2, "rust": 3}
_TOKEN = re.compile(r'"[^"]*"|@?[A-Za-z_][A-Za-z0-9_]*|&&|\|\||!(?!=)')

VERBS = (
    *("load", "parse", "normalize", "compute", "merge", "validate", "encode", "decode"),
    *("resolve", "build", "apply", "format", "flush", "record", "split", "collect", "reset"),
    *("schedule", "lookup", "prune", "snapshot", "drain"),
)
NOUNS = (
    *("entries", "header", "key", "window", "options", "cursor", "payload", "batch"),
    *("deadline", "token", "bucket", "record", "row", "label", "offset", "limit", "interval"),
    *("budget", "snapshot", "metrics", "state", "span"),
)
LOCALS = (
    *("count", "total", "elapsed", "remaining", "offset", "result", "current", "scaled"),
    *("window_end", "attempts", "deadline", "bucket_size", "weight", "budget", "cutoff"),
)
_NOTES = (
    "keep this cheap: it runs on every request",
    "callers rely on the order of the returned values",
    "see the design note in docs/architecture.md",
    "guard against clock skew between hosts",
    "this mirrors the behaviour of the legacy service",
    "values are validated at load time, so no checks here",
    "hot path: avoid allocating",
    "TODO(perf): batch these calls",
)
# The ("log", text) and ("raise", text) statements, spelt per language (MESSAGE: the text).
_MESSAGE_CALLS = {
    "log": {
        "python": 'logger.debug("MESSAGE")',
        "typescript": 'logger.debug("MESSAGE");',
        "go": 'log.Printf("MESSAGE")',
        "rust": 'tracing::debug!("MESSAGE");',
    },
    "raise": {
        "python": 'raise ValueError("MESSAGE")',
        "typescript": 'throw new RangeError("MESSAGE");',
        "go": 'panic("MESSAGE")',
        "rust": 'panic!("MESSAGE");',
    },
}


@dataclass
class Function:
    """A function or method in the neutral IR."""

    name: str
    params: list[tuple[str, str]]
    ret: str
    doc: str
    body: list[Stmt]
    method: bool = True
    exported: bool = True


@dataclass
class Source:
    """A rendered file and the 1-based line where each function starts."""

    text: str
    lines: dict[str, int] = field(default_factory=dict)


def _expr(lang: str, text: str, recv: str) -> str:
    def convert(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith('"'):
            return token
        if token in ("&&", "||", "!"):
            return {"&&": "and", "||": "or", "!": "not "}[token] if lang == "python" else token
        if token == "none":
            return {"python": "None", "typescript": "undefined", "go": "nil"}.get(lang, "None")
        if token.startswith("@"):
            name = token[1:]
            owner = {"python": "self", "typescript": "this", "go": recv}.get(lang, "self")
            return f"{owner}.{camel(name) if lang in ('typescript', 'go') else name}"
        if lang in ("typescript", "go") and token[:1].islower():
            return camel(token)
        return token

    out = _TOKEN.sub(convert, text)
    return out.replace(" != None", " is not None") if lang == "python" else out


def _stmts(lang: str, body: list[Stmt], depth: int, recv: str) -> list[str]:
    unit = {"python": "    ", "typescript": "  ", "go": "\t", "rust": "    "}[lang]
    pad = unit * depth
    semi = ";" if lang in ("typescript", "rust") else ""
    out: list[str] = []
    for stmt in body:
        kind = stmt[0]
        if kind == "let":
            var, value = _expr(lang, stmt[1], recv), _expr(lang, stmt[2], recv)
            decl = {"python": f"{var} = ", "typescript": f"const {var} = ", "go": f"{var} := "}
            out.append(f"{pad}{decl.get(lang, f'let {var} = ')}{value}{semi}")
        elif kind == "var":
            var, value = _expr(lang, stmt[1], recv), _expr(lang, stmt[2], recv)
            decl = {"python": f"{var} = ", "typescript": f"let {var} = ", "go": f"{var} := "}
            out.append(f"{pad}{decl.get(lang, f'let mut {var} = ')}{value}{semi}")
        elif kind == "set":
            out.append(f"{pad}{_expr(lang, stmt[1], recv)} = {_expr(lang, stmt[2], recv)}{semi}")
        elif kind in ("if", "for"):
            if kind == "if":
                cond = _expr(lang, stmt[1], recv)
                head = (
                    f"if {cond}:"
                    if lang == "python"
                    else (f"if ({cond}) {{" if lang == "typescript" else f"if {cond} {{")
                )
                inner = stmt[2]
            else:
                var, items = _expr(lang, stmt[1], recv), _expr(lang, stmt[2], recv)
                head = {
                    "python": f"for {var} in {items}:",
                    "typescript": f"for (const {var} of {items}) {{",
                    "go": f"for _, {var} := range {items} {{",
                }.get(lang, f"for {var} in {items}.iter() {{")
                inner = stmt[3]
            out.append(pad + head)
            out += _stmts(lang, inner, depth + 1, recv)
            if lang != "python":
                out.append(pad + "}")
        elif kind == "ret":
            out.append(f"{pad}return {_expr(lang, stmt[1], recv)}{semi}")
        elif kind == "call":
            out.append(f"{pad}{_expr(lang, stmt[1], recv)}{semi}")
        elif kind in _MESSAGE_CALLS:
            spellings = _MESSAGE_CALLS[kind]
            out.append(pad + spellings.get(lang, spellings["rust"]).replace("MESSAGE", stmt[1]))
        elif kind == "note":
            out.append(f"{pad}{'#' if lang == 'python' else '//'} {stmt[1]}")
    return out


def render_function(lang: str, fn: Function, *, cls: str, depth: int) -> list[str]:
    """The lines of ``fn`` (a method of ``cls`` when ``fn.method``), indented ``depth`` levels."""
    i = _INDEX[lang]
    unit = {"python": "    ", "typescript": "  ", "go": "", "rust": "    "}[lang]
    pad = unit * depth
    recv = cls[0].lower()
    ret = _TYPES[fn.ret][i]
    if lang == "python":
        params = ", ".join(
            [*(["self"] if fn.method else []), *(f"{n}: {_TYPES[t][0]}" for n, t in fn.params)]
        )
        return [
            f"{pad}def {fn.name}({params}) -> {ret}:",
            f'{pad}    """{fn.doc}"""',
            *_stmts(lang, fn.body, depth + 1, recv),
        ]
    if lang == "typescript":
        args = ", ".join(f"{camel(n)}: {_TYPES[t][1]}" for n, t in fn.params)
        name = camel(fn.name)
        start = f"{pad}{'' if fn.method else 'export function '}{name}({args}): {ret} {{"
        return [f"{pad}/** {fn.doc} */", start, *_stmts(lang, fn.body, depth + 1, recv), pad + "}"]
    if lang == "go":
        args = ", ".join(f"{camel(n)} {_TYPES[t][2]}" for n, t in fn.params)
        name = pascal(fn.name) if fn.exported else camel(fn.name)
        owner = f"({recv} *{cls}) " if fn.method else ""
        return [
            f"// {name} {fn.doc[:1].lower()}{fn.doc[1:]}",
            f"func {owner}{name}({args}) {ret} {{",
            *_stmts(lang, fn.body, 1, recv),
            "}",
        ]
    args = ", ".join(
        [*(["&self"] if fn.method else []), *(f"{n}: {_TYPES[t][3]}" for n, t in fn.params)]
    )
    return [
        f"{pad}/// {fn.doc}",
        f"{pad}pub fn {fn.name}({args}) -> {ret} {{",
        *_stmts(lang, fn.body, depth + 1, recv),
        pad + "}",
    ]


def random_function(rng: random.Random, fields: list[str], *, method: bool = True) -> Function:
    """A plausible helper with a random name, parameters and a 4-14 statement body."""
    verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
    kinds = ["int", "float", "str", "bool", "list"]
    params = [(n, rng.choice(kinds)) for n in rng.sample(NOUNS, rng.randint(1, 3)) if n != noun]
    numeric = [n for n, t in params if t in ("int", "float")] or [f"@{fields[0]}"]
    lists = [n for n, t in params if t == "list"]
    names = rng.sample([x for x in LOCALS if x not in dict(params)], 5)
    body: list[Stmt] = []
    if rng.random() < 0.4:
        body.append(("note", rng.choice(_NOTES)))
    ops = ("+", "-", "*", "/")
    for k, var in enumerate(names[: rng.randint(2, 5)]):
        pool = numeric + [f"@{f}" for f in fields[:3]] + names[:k]
        left = rng.choice(pool)
        right = rng.choice([x for x in pool if x != left] or pool)
        if rng.random() < 0.3:
            body.append(("let", var, f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}({left}, {right})"))
        else:
            body.append(("let", var, f"{left} {rng.choice(ops)} {right}"))
        roll = rng.random()
        if roll < 0.25:
            body.append(
                ("if", f"{var} < 0", [("log", f"{verb}_{noun}: negative {var}"), ("ret", "0")])
            )
        elif roll < 0.35 and lists:
            item = rng.choice(("item", "entry", "name"))
            inner: list[Stmt] = [("call", f"record_{rng.choice(NOUNS)}({item}, {var})")]
            body.append(("for", item, lists[0], inner))
        elif roll < 0.42:
            body.append(
                (
                    "if",
                    f"{var} > @{rng.choice(fields)} && !@strict",
                    [("raise", f"{var} out of range")],
                )
            )
    body.append(("ret", names[0]))
    doc = f"{verb.capitalize()} the {noun} for the current {rng.choice(NOUNS)}."
    return Function(f"{verb}_{noun}", params, "int", doc, body, method=method)


def buggy_function(project: Project, *, fixed: bool = False) -> Function:
    """The method the task is about; ``fixed`` applies the clamp the agent ends up writing."""
    d = project.domain
    body: list[Stmt] = [
        ("var", "value", f"compute_{d.module}_value(attempt, @{d.field})"),
        ("note", f"NOTE: {d.bug}" if not fixed else f"clamp to {d.field} (issue #{project.issue})"),
        (
            "if",
            f"@{d.crash_field} != none",
            [("set", "value", f"adjust_{d.module}(value, @{d.crash_field})")],
        ),
        ("if", f"value > @{d.field}", [("log", f"{d.func} exceeded {d.field}")]),
    ]
    if fixed:
        body.append(("if", f"value > @{d.field}", [("set", "value", f"@{d.field}")]))
    body.append(("ret", "value"))
    doc = f"Returns the {d.module.replace('_', ' ')} value for the given attempt."
    return Function(d.func, [("attempt", "int")], "int", doc, body)


def source_file(
    rng: random.Random, project: Project, path: str, *, lines: int, main: bool = False
) -> Source:
    """A module of about ``lines`` lines; ``main`` puts the project's class and method in it."""
    lang = project.language
    d = project.domain
    cls = d.cls if main else pascal(rng.choice(NOUNS)) + rng.choice(("Store", "Client", "Registry"))
    fields = [d.field, d.crash_field, "strict"] if main else [*rng.sample(NOUNS, 3), "strict"]
    funcs = [random_function(rng, fields) for _ in range(40)]
    if main:
        funcs.insert(rng.randint(1, 3), buggy_function(project))
    out = _header(lang, project, path, cls, fields, rng)
    positions: dict[str, int] = {}
    depth = 1 if lang in ("python", "typescript", "rust") else 0
    for fn in funcs:
        if len(out) >= lines - 4 and (not main or d.func in positions):
            break
        out.append("")
        positions[fn.name] = len(out) + 2
        out += render_function(lang, fn, cls=cls, depth=depth)
    if lang in ("typescript", "rust"):
        out.append("}")
    return Source("\n".join(out) + "\n", positions)


def _header(
    lang: str, project: Project, path: str, cls: str, fields: list[str], rng: random.Random
) -> list[str]:
    module = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    if cls == project.cls:
        const, value = f"DEFAULT_{project.config_key.upper()}", project.config_value
    else:
        const, value = f"DEFAULT_{rng.choice(NOUNS).upper()}_LIMIT", rng.randint(2, 500)
    if lang == "python":
        return [
            f'"""{module.replace("_", " ").capitalize()}: {rng.choice(VERBS)} and '
            f'{rng.choice(VERBS)} {rng.choice(NOUNS)} for {project.package}."""',
            "",
            "from __future__ import annotations",
            "",
            "import logging",
            "import time",
            "from dataclasses import dataclass",
            "",
            f"from {project.package}.errors import ConfigError",
            f"from {project.package}.metrics import counter",
            "",
            "logger = logging.getLogger(__name__)",
            "",
            f"{const} = {value}",
            "",
            "",
            "@dataclass",
            f"class {cls}:",
            f'    """{cls} keeps the {rng.choice(NOUNS)} state for one {rng.choice(NOUNS)}."""',
            "",
            *(f"    {f}: int = 0" for f in fields),
        ]
    if lang == "typescript":
        return [
            'import { logger } from "../logger";',
            'import { ConfigError } from "../errors";',
            "",
            f"export const {const} = {value};",
            "",
            f"export interface {cls}Options {{",
            *(f"  {camel(f)}?: number;" for f in fields),
            "}",
            "",
            f"export class {cls} {{",
            *(f"  private {camel(f)}: number;" for f in fields),
            "",
            f"  constructor(options: {cls}Options = {{}}) {{",
            *(f"    this.{camel(f)} = options.{camel(f)} ?? 0;" for f in fields),
            "  }",
        ]
    if lang == "go":
        area = project.domain.area
        return [
            f"// Package {area} implements the {area} layer of {project.repo}.",
            f"package {area}",
            "",
            "import (",
            '\t"fmt"',
            '\t"log"',
            '\t"time"',
            ")",
            "",
            f"const {camel(const.lower())} = {value}",
            "",
            f"// {cls} holds the {module} state.",
            f"type {cls} struct {{",
            *(f"\t{camel(f)} int" for f in fields),
            "}",
            "",
            f"// New{cls} builds a {cls} from the loaded configuration.",
            f"func New{cls}(cfg Config) *{cls} {{",
            f"\treturn &{cls}{{{camel(fields[0])}: cfg.{pascal(project.config_key)}}}",
            "}",
        ]
    return [
        f"//! {module.replace('_', ' ').capitalize()} for the {project.domain.area} layer.",
        "",
        "use std::collections::HashMap;",
        "use std::time::{Duration, Instant};",
        "",
        "use crate::errors::Error;",
        "",
        f"pub const {const}: i64 = {value};",
        "",
        "#[derive(Debug, Clone, Default)]",
        f"pub struct {cls} {{",
        *(f"    pub {f}: i64," for f in fields),
        "}",
        "",
        f"impl {cls} {{",
    ]


def numbered(text: str, *, start: int = 1) -> str:
    """``text`` with ``cat -n`` style line numbers, as ``read_file`` returns it."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(text.splitlines(), start=start))
