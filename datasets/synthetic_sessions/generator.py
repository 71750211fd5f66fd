"""A deterministic synthetic dataset: long coding-agent sessions with planted gold facts.

``generate_cases(seed=..., count=...)`` returns ``count`` cases, each a realistic tool-using
session in Chat Completions format (system prompt, task with constraints, ~55-140 messages of
``read_file``/``grep``/``bash``/``edit_file`` calls, parallel calls included, with large outputs:
whole files, test runs with tracebacks, compiler errors, logs). Each session follows the same arc
in varied languages (Python, TypeScript, Go, Rust), bugs and names: reproduce a failing test, try
a first fix that breaks the build, change plan, receive one more constraint from the user, fix,
hit a second failure, verify, and note the work still open.

Invariants (pinned by tests): the output depends only on ``seed`` and ``count`` (one
``random.Random`` per case, seeded from a master ``random.Random(seed)``, so the first cases of a
larger ``count`` equal a smaller one's); every gold fact's ``text`` and every probe's ``answer``
occurs verbatim in the case's messages; most facts first occur in the first 60% of the messages.
"""

from __future__ import annotations

import random
import re
from typing import Any

from context_summarizer.evaluation.dataset import Case, GoldFact, Probe

from .code import buggy_function, render_function
from .output import compile_failure, git_log
from .project import DOMAINS, LANGUAGES, Project, make_project
from .runner_output import test_run
from .session import Session, filler

GENERATOR = "summarizer.evaluation.synthetic"
"""The ``metadata["generator"]`` of every synthetic case.

A stable name of this generator, written into every case, not an import path: it is the module's
name from before it left the ``summarizer`` package, kept so the shipped dataset stays unchanged.
"""

MODEL = "gpt-4o"
"""The model every synthetic case names (its tokenizer is o200k_base)."""


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    required = [key for key in properties if not key.startswith("_")]
    props = {
        key.lstrip("_"): {"type": "string", "description": text} for key, text in properties.items()
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "read_file",
        "Read a file, with line numbers.",
        path="Path relative to the repo root",
        _start_line="First line to show (1-based)",
        _end_line="Last line to show",
    ),
    _tool("list_dir", "List a directory recursively.", path="Directory relative to the root"),
    _tool(
        "grep",
        "Search files for a fixed string.",
        pattern="Text to search for",
        _path="Directory to search (default: the whole repo)",
    ),
    _tool(
        "edit_file",
        "Replace one exact occurrence of old_string with new_string.",
        path="File to edit",
        old_string="Exact text to replace",
        new_string="Replacement",
    ),
    _tool(
        "bash",
        "Run a shell command in the repository root.",
        command="The command",
        _timeout="Timeout in seconds (default 120)",
    ),
]
"""The function tools every synthetic session declares."""

_TOOLING = {
    "python": ("pytest", "mypy"),
    "typescript": ("jest", "tsc"),
    "go": ("go test", "go vet"),
    "rust": ("cargo test", "the compiler"),
}


def _code(p: Project, *, fixed: bool = False, float_param: bool = False) -> str:
    fn = buggy_function(p, fixed=fixed)
    if float_param:
        fn.params = [("attempt", "float")]
    depth = 0 if p.language == "go" else 1
    return "\n".join(render_function(p.language, fn, cls=p.cls, depth=depth))


def _early(s: Session) -> None:
    p, rng = s.p, s.rng
    runner, checker = _TOOLING[p.language]
    only = [p.test1] if p.language == "go" else None  # go test -run selects one test
    s.say("system", _system_prompt(rng, p))
    extra = rng.choice(("", "\n- Please don't add new dependencies."))
    s.say(
        "user",
        f"We have a bug report (issue #{p.issue}) against {p.repo}: {p.domain.symptom}. Please "
        f"find the root cause in the {p.domain.area} code and fix it.\n\nConstraints:\n"
        f"- It {p.version_constraint}.\n- Please {p.api_constraint}; other services depend on "
        f"it.{extra}\n\nRun the relevant tests before you tell me it's done.",
    )
    s.turn(
        "I'll start with the repository layout and the README.",
        ("list_dir", {"path": "."}, s.listing()),
        s.read("README.md"),
    )
    src = p.main_path.rsplit("/", 1)[0]
    s.turn(
        f"The {p.domain.area} code lives under {src}/. Let me find where the "
        f"{p.domain.module.replace('_', ' ')} logic is defined and used.",
        s.grep(p.func),
    )
    s.turn(
        f"{p.cls}.{p.func} is defined in {p.main_path}. Reading the whole module.",
        s.read(p.main_path),
    )
    s.turn(
        f"Before changing anything, let me reproduce the failure with {runner}.",
        s.bash(p.test_cmd, test_run(rng, p, s.test, s.main, failing=p.test1, only=only)),
    )
    s.turn(f"{p.test1_id} fails. Let me look at the test itself.", s.read(p.test_path))
    s.turn(
        f"The test expects the value to stay within {p.config_key}. Checking the configured value "
        "and where the setting is read.",
        s.read(p.config_path),
        s.grep(p.config_key),
    )
    s.turn(
        f"So {p.config_key} is {p.config_value} in {p.config_path}, and {p.cls}.{p.func} is "
        f"where it goes wrong: {p.domain.bug}. Let me check recent history of the file before "
        f"touching it; {checker} should stay clean too.",
        s.bash(f"git log --oneline -n 12 -- {p.main_path}", git_log(rng, p, 12)),
    )


def _system_prompt(rng: random.Random, p: Project) -> str:
    name = rng.choice(("Forge", "Patchwork", "Atlas", "Wrench", "Pilot"))
    return (
        f"You are {name}, an autonomous software engineering agent working in the {p.lang_label} "
        f"repository {p.repo}, checked out at /workspace/{p.repo.split('/')[1]}. You act only "
        "through the tools provided: read_file, list_dir, grep, edit_file and bash.\n\n"
        "Rules:\n- Reproduce a bug before fixing it, and run the relevant tests after every "
        "change.\n- Make the smallest change that fixes the root cause; do not reformat "
        "unrelated code.\n- Explain each decision in one or two sentences before acting on it.\n"
        "- Never commit, push or rewrite git history; the user reviews and commits.\n"
        "- If a constraint from the user conflicts with a fix, stop and say so.\n"
        "- Keep tool outputs in mind: they are not shown to the user."
    )


def _single_cmd(p: Project) -> str:
    """The command running only the first failing test."""
    if p.language == "python":
        return f"python -m pytest {p.test1_id} -q"
    if p.language == "typescript":
        return f'npx jest {p.test_path} -t "{p.test1.replace("_", " ")}"'
    if p.language == "go":
        return p.test_cmd
    return f"{p.test_cmd} {p.test1}"


def _module_cmd(p: Project) -> str:
    """The command running the whole test module."""
    return p.test_cmd.split(" -run ")[0] + " -v" if p.language == "go" else p.test_cmd


def _mid(s: Session) -> None:
    p, rng = s.p, s.rng
    _, checker = _TOOLING[p.language]
    original, floating = _code(p), _code(p, float_param=True)
    s.turn(
        f"First attempt: let {p.func} take the attempt as a float so the clamp against "
        f"{p.field} can be computed in one place.",
        s.edit(p.main_path, original, floating),
    )
    s.turn("Checking that it still type-checks.", s.bash(p.lint_cmd, compile_failure(rng, p)))
    s.turn(
        f"{checker[:1].upper()}{checker[1:]} rejects it: changing the parameter type breaks "
        "the callers, and it would change a public signature, which the task rules out "
        f"({p.api_constraint}). Reverting that edit.",
        s.edit(p.main_path, floating, original),
    )
    s.say(
        "assistant",
        f"Change of plan. Decision: {p.decision}. That keeps every signature as it is, fixes "
        f"{p.test1_id}, and needs no change to {p.config_path}. I'll make that change next unless "
        "you object.",
    )
    s.say("user", f"Sounds good, go ahead. One more thing: {p.mid_constraint}.")
    s.turn(
        f"Understood. Applying the fix in {p.main_path}.",
        s.edit(p.main_path, original, _code(p, fixed=True)),
    )
    passing = test_run(rng, p, s.test, s.main, failing=None, only=[p.test1])
    s.turn("Re-running the failing test.", s.bash(_single_cmd(p), passing))


def _crash(s: Session) -> None:
    p, rng = s.p, s.rng
    s.turn(
        f"The call sites look fine. Now the whole test module, not just {p.test1_id}.",
        s.bash(_module_cmd(p), test_run(rng, p, s.test, s.main, failing=p.test2)),
    )
    start = max(1, s.main.lines.get(p.domain.func, 1) - 3)
    s.turn(
        f"Now {p.test2_id} fails with: {p.crash_error}. So {p.crash_field} can be unset, and "
        f"the new code path reaches it. Looking at {p.func} again.",
        s.read(p.main_path, start, start + 24),
    )
    line = next(x for x in _code(p, fixed=True).splitlines() if "adjust" in x.lower())
    owner = {"python": "self", "typescript": "this", "go": p.cls[0].lower()}.get(p.language, "self")
    ref = f"{owner}.{p.name(p.crash_field)}"
    safe = {"python": f"{ref} or 0", "typescript": f"{ref} ?? 0", "go": f"valueOr({ref}, 0)"}
    guarded = line.replace(ref, safe.get(p.language, f"{ref}.unwrap_or(0)"))
    s.turn(f"Guarding the unset {p.crash_field}.", s.edit(p.main_path, line, guarded))
    passing = test_run(rng, p, s.test, s.main, failing=None)
    s.turn("And the module once more.", s.bash(_module_cmd(p), passing))


def _late(s: Session) -> None:
    p, rng = s.p, s.rng
    if "CHANGELOG" in p.open_work:
        target = "CHANGELOG.md"
    else:
        target = p.manifest_path if "bump" in p.open_work else "docs/configuration.md"
    if target not in s.files:
        s.files[target] = f"# Configuration\n\nSettings are read from {p.config_path}.\n"
    s.turn(
        f"All green: {p.suite_cmd} passes and {p.lint_cmd} is clean. Remaining: I {p.open_work} "
        "before this is done. Let me open it.",
        s.read(target),
    )
    if rng.random() < 0.5:
        s.say(
            "assistant",
            f"Status: the fix is in {p.main_path} ({p.cls}.{p.func}); {p.test1_id} and "
            f"{p.test2_id} pass, and so does the full suite. Next: I {p.open_work}.",
        )


def _fact(fid: str, text: str, kind: str, *aliases: str) -> GoldFact:
    return GoldFact(id=fid, text=text, kind=kind, aliases=[a for a in aliases if a != text])


def _facts(rng: random.Random, p: Project) -> list[GoldFact]:
    decision_alias = {
        "shim": ("add a shim", f"keep the v1 {p.func} API"),
        "inside": (f"fix inside {p.cls}", "rather than in the callers"),
        "clamp": (f"clamp inside {p.func}", f"clamp in {p.func}"),
    }
    key = next(k for k in decision_alias if k in p.decision)
    required = [
        _fact(
            "constraint-1",
            p.version_constraint,
            "constraint",
            f"{p.lang_label} {p.runtime_version}",
        ),
        _fact("constraint-2", p.api_constraint, "constraint", "keep public signatures unchanged"),
        _fact("path-1", p.main_path, "path", p.main_path.replace("/", "\\"), "./" + p.main_path),
        _fact("identifier-1", p.cls, "identifier"),
        _fact("identifier-2", p.func, "identifier", f"{p.cls}.{p.func}"),
        _fact("command-1", p.test_cmd, "command"),
        _fact("error-1", p.assert_error, "error", p.assert_error.split(": ", 1)[-1]),
        _fact("test-1", p.test1_id, "test", p.test1_id.rsplit("::", 1)[-1].rsplit(" › ", 1)[-1]),
        _fact(
            "quantity-1",
            str(p.config_value),
            "quantity",
            f"{p.config_key} = {p.config_value}",
            f"{p.config_key}: {p.config_value}",
        ),
        _fact("decision-1", p.decision, "decision", *decision_alias[key]),
        _fact("constraint-3", p.mid_constraint, "constraint"),
        _fact("open-work-1", p.open_work, "open_work", p.open_work.removeprefix("still need to ")),
    ]
    optional = [
        _fact("path-2", p.test_path, "path", p.test_path.replace("/", "\\")),
        _fact("path-3", p.config_path, "path", p.config_path.replace("/", "\\")),
        _fact("quantity-2", str(p.port), "quantity", f"port {p.port}"),
        _fact("error-2", p.compile_error, "error", _compile_alias(p)),
        _fact("error-3", p.crash_error, "error", p.crash_error.split(": ", 1)[-1]),
        _fact("test-2", p.test2_id, "test", p.test2_id.rsplit("::", 1)[-1].rsplit(" › ", 1)[-1]),
    ]
    return required + rng.sample(optional, rng.randint(0, 3))


def _compile_alias(p: Project) -> str:
    """The compiler error without its location (``E0308`` for rustc's generic headline)."""
    if p.language == "rust":
        return p.compile_error.split("[", 1)[1].split("]", 1)[0]
    return re.sub(r"^\S+?(?::\d+(?::\d+)?|\(\d+,\d+\)): (?:error:? )?", "", p.compile_error)


def _probes(rng: random.Random, p: Project) -> list[Probe]:
    pool = [
        Probe(
            question=f"Which file holds the {p.domain.module.replace('_', ' ')} logic that "
            "was fixed?",
            answer=p.main_path,
        ),
        Probe(question="What port does the dev server listen on?", answer=str(p.port)),
        Probe(
            question=f"What is {p.config_key} set to in {p.config_path}?",
            answer=str(p.config_value),
        ),
        Probe(question="Which test failed first?", answer=p.test1_id),
        Probe(question="Which command reproduces the original failure?", answer=p.test_cmd),
        Probe(
            question=f"Which {p.lang_label} version must the code stay compatible with?",
            answer=p.runtime_version,
        ),
        Probe(question=f"Which class defines {p.func}?", answer=p.cls),
        Probe(
            question="Which other test failed once the first failing test passed?",
            answer=p.test2_id,
        ),
    ]
    return rng.sample(pool, rng.randint(3, 6))


def _case(seed: int, index: int, case_seed: int, domain_offset: int) -> Case:
    rng = random.Random(case_seed)
    language = LANGUAGES[index % len(LANGUAGES)]
    domain = DOMAINS[(domain_offset + index + index // len(DOMAINS)) % len(DOMAINS)]
    p = make_project(rng, language, domain)
    s = Session(rng, p)
    total_messages, total_tokens = rng.randint(56, 140), rng.randint(20_000, 50_000)
    _early(s)
    budget = max(0, total_tokens - s.tokens() - 6_000)
    filler(
        s,
        until=round(rng.uniform(0.27, 0.35) * total_messages),
        tokens=budget * 35 // 100,
        verify=False,
    )
    _mid(s)
    filler(
        s,
        until=round(rng.uniform(0.6, 0.7) * total_messages),
        tokens=budget * 25 // 100,
        verify=False,
    )
    _crash(s)
    filler(
        s, until=total_messages - 3, tokens=max(0, total_tokens - s.tokens() - 1_500), verify=True
    )
    _late(s)
    return Case(
        id=f"synthetic-{seed}-{index:03d}",
        messages=s.messages,
        tools=TOOLS,
        model=MODEL,
        facts=_facts(rng, p),
        probes=_probes(rng, p),
        metadata={
            "generator": GENERATOR,
            "seed": seed,
            "index": index,
            "language": language,
            "scenario": domain.module,
            "repo": p.repo,
        },
    )


def generate_cases(*, seed: int, count: int) -> list[Case]:
    """``count`` synthetic cases for ``seed``; the same arguments always give the same cases.

    Case ``i`` depends only on ``seed`` and ``i``, so a larger ``count`` extends a smaller one.
    """
    master = random.Random(seed)
    domain_offset = master.randrange(len(DOMAINS))
    seeds = [master.getrandbits(64) for _ in range(count)]
    return [_case(seed, index, case_seed, domain_offset) for index, case_seed in enumerate(seeds)]
