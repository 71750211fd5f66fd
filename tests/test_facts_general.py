"""The fact ledger beyond Python: paths of any extension (and in tool-call arguments), commands of
any ecosystem, error lines of any runtime, ``ERR-``-style codes. Each line is what the tool prints
(real formats, made-up names)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_summarizer.core.facts import extract_facts


def tool(content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "call_1", "content": content}


def said(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
    }


def of_kind(kind: str, messages: list[dict[str, Any]]) -> list[str]:
    return [fact.text for fact in extract_facts(messages) if fact.kind == kind]


# --- errors of every runtime ------------------------------------------------------------------

ERROR_LINES = {
    "python traceback": "django.db.utils.OperationalError: no such table: __main___reservedname",
    "python syntax": "SyntaxError: invalid syntax",
    "node exception": "TypeError: Cannot read properties of undefined (reading 'map')",
    "node coded error": "Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'left-pad'",
    "node coded exception": 'TypeError [ERR_INVALID_ARG_TYPE]: The "path" argument must be string',
    "npm": "npm ERR! code ELIFECYCLE",
    "npm 10": 'npm error Missing script: "build"',
    "jest file": "FAIL src/components/Cart.test.tsx",
    "tsc": "src/index.ts(12,5): error TS2304: Cannot find name 'totl'.",
    "tsc pretty": "src/index.ts:12:5 - error TS2304: Cannot find name 'totl'.",
    "go compile": "./main.go:14:2: undefined: computeTotal",
    "go panic": "panic: runtime error: index out of range [5] with length 3",
    "go test": "--- FAIL: TestInvoiceTotal (0.00s)",
    "go package": "FAIL\tgithub.com/acme/billing\t0.012s",
    "rust": "error[E0425]: cannot find value `total` in this scope",
    "rust panic": "thread 'main' panicked at src/main.rs:5:5:",
    "rust test": "test tests::applies_discount ... FAILED",
    "java": 'Exception in thread "main" java.lang.NullPointerException: Cannot invoke "x.size()"',
    "java cause": "Caused by: java.io.FileNotFoundException: config.yml (No such file)",
    "javac": "src/main/java/App.java:7: error: cannot find symbol",
    "maven": "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.11.0",
    "gradle": "FAILURE: Build failed with an exception.",
    "gradle task": "> Task :app:compileKotlin FAILED",
    "kotlin": "e: file:///src/main/kotlin/App.kt:3:5 Unresolved reference: totl",
    "ruby": "app/models/user.rb:12:in 'save': undefined method 'name' for nil (NoMethodError)",
    "rspec": "Failure/Error: expect(total).to eq(42)",
    "elixir": "** (RuntimeError) no :secret_key_base configuration found in SpotterWeb.Endpoint.",
    "elixir compile": "** (CompileError) lib/billing.ex:3: undefined function total/0",
    "exunit": "Assertion with == failed",
    "elixir mix": "error: undefined function get/2 (expected MyAppWeb.PageTest to define it)",
    "c": "src/main.c:12:5: error: expected ';' before '}' token",
    "c fatal": "main.c:1:10: fatal error: billing.h: No such file or directory",
    "linker": "/usr/bin/ld: main.o: in function `main': main.c:(.text+0x1e): undefined reference "
    "to `total'",
    "collect2": "collect2: error: ld returned 1 exit status",
    "make": "make: *** [Makefile:12: all] Error 1",
    "make nested": "make[2]: *** [CMakeFiles/app.dir/build.make:76: app] Error 1",
    "cmake": "CMake Error at CMakeLists.txt:5 (find_package):",
    "ctest": "The following tests FAILED:",
    "segfault": "Segmentation fault (core dumped)",
    "assert": "app: src/cart.c:40: total: Assertion `n > 0' failed.",
    "dotnet": "Program.cs(12,5): error CS0103: The name 'totl' does not exist in the context",
    "dotnet unhandled": "Unhandled exception. System.InvalidOperationException: Sequence empty",
    "swift": "Fatal error: Index out of range",
    "php": "PHP Fatal error:  Uncaught Error: Call to undefined function totl() in /app/a.php:3",
    "perl": "Can't locate Billing/Total.pm in @INC (you may need to install Billing::Total)",
    "shell": "sh: 1: jq: not found",
    "git": "fatal: The current branch spotter-gqc has no upstream branch.",
}


@pytest.mark.parametrize("line", list(ERROR_LINES.values()), ids=list(ERROR_LINES))
def test_error_lines_of_every_runtime(line: str) -> None:
    output = f"some output before\n{line}\nsome output after\n"
    assert line in of_kind("error", [tool(output)])


@pytest.mark.parametrize(
    "line",
    [
        "Error handling is important, and so is logging.",
        "We failed to reproduce it; FAILURE modes are listed in docs/failures.md.",
        "The test suite has no failures: 12 passed in 0.31s",
        '  warning: variable "messages" is unused',
        "panicked users wrote in",
        "src/app.py:12:    total = compute()",  # grep -n output, not a diagnostic
    ],
)
def test_lines_that_only_look_like_errors_are_not(line: str) -> None:
    assert of_kind("error", [tool(line)]) == []


def test_err_style_codes_are_errors_wherever_they_stand() -> None:
    output = (
        "order 991 rejected with ERR-26936 (amounts out of balance)\n"
        "retrying... status=ERROR_1042; see E-0077\n"
        "node: Error code ERR_REQUIRE_ESM raised by loader\n"
        "PROJ-1234 and ERRATA-2 and HERR-12 are not error codes\n"
    )
    codes = of_kind("error", [tool(output)])
    assert codes == ["ERR-26936", "ERROR_1042", "E-0077", "ERR_REQUIRE_ESM"]


def test_failing_test_names_of_go_rust_and_exunit() -> None:
    output = (
        "--- FAIL: TestInvoiceTotal (0.00s)\n"
        "test tests::applies_discount ... FAILED\n"
        "  1) test applies the discount (Billing.InvoiceTest)\n"
        "     test/billing/invoice_test.exs:12\n"
        "  2) test applies the discount (Billing.InvoiceTest)\n"  # the same test, run again
    )
    assert of_kind("test", [tool(output)]) == [
        "TestInvoiceTotal",
        "tests::applies_discount",
        "test applies the discount (Billing.InvoiceTest)",
    ]


# --- commands of every ecosystem --------------------------------------------------------------

COMMANDS = [
    "make -j4 test",
    "mix test test/billing_test.exs",
    "bundle exec rspec spec/models/user_spec.rb",
    "./gradlew test --tests InvoiceTest",
    "cargo test --release",
    "go test ./...",
    "npm run build",
    "pnpm install --frozen-lockfile",
    "yarn jest src/cart.test.ts",
    "pip install -e .",
    "uv run pytest -q",
    "poetry run pytest",
    "mvn -q test",
    "dotnet test Billing.sln",
    "swift test --filter InvoiceTests",
    "ctest --output-on-failure",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_commands_in_code_spans(command: str) -> None:
    assert of_kind("command", [said(f"Now run `{command}` to check the fix.")]) == [command]


def test_commands_in_shell_fences_skip_heredocs_and_strings() -> None:
    text = (
        "THOUGHT: write the script, then run it.\n\n"
        "```bash\n"
        "cat <<'EOF' > reproduce_issue.py\n"
        "import billing\n"
        "print(billing.total())\n"
        "EOF\n"
        "python3 reproduce_issue.py && cargo build\n"
        'python -c "\n'
        "import sys\n"
        "print(sys.path)\n"
        '"\n'
        "```\n"
        "and a block that is not shell:\n"
        "```python\nrun_tests()\n```\n"
    )
    assert of_kind("command", [said(text)]) == [
        "cat <<'EOF' > reproduce_issue.py",
        "python3 reproduce_issue.py && cargo build",
        'python -c "',
    ]


def test_unlabelled_fence_lines_are_commands_only_when_they_start_with_one() -> None:
    text = "```\nnpm test\nexpected 3 to equal 4\n```"
    assert of_kind("command", [said(text)]) == ["npm test"]


def test_prose_and_single_words_are_not_commands() -> None:
    text = "Make sure the `make` target exists; go test it, then `cargo` and `the go test`."
    assert of_kind("command", [said(text)]) == []


def test_powershell_prompt() -> None:
    assert of_kind("command", [tool("PS C:\\src\\billing> dotnet build")]) == ["dotnet build"]


# --- paths of any extension, and in tool-call arguments ---------------------------------------


def test_bare_file_names_of_many_ecosystems() -> None:
    names = [
        "mix.exs", "index.heex", "app.gemspec", "build.gradle.kts", "Billing.csproj",
        "App.sln", "schema.prisma", "main.zig", "shell.nix", "core.clj", "Main.elm",
        "view.erb", "page.astro", "go.mod", "go.sum", "Pipfile", "Podfile", "CMakeLists.txt",
    ]  # fmt: skip
    assert of_kind("path", [tool("  ".join(names))]) == names


def test_paths_with_a_directory_need_no_known_extension() -> None:
    text = "lib/spotter_web/live/session_live.heex and priv/repo/seeds.foo and assets/app.xyz"
    assert of_kind("path", [tool(text)]) == [
        "lib/spotter_web/live/session_live.heex",
        "priv/repo/seeds.foo",
        "assets/app.xyz",
    ]


def test_path_arguments_of_a_tool_call_are_paths_whatever_their_shape() -> None:
    messages = [
        call("Read", {"file_path": "notes.weird"}),
        call("Edit", {"path": "CHANGELOG", "old_string": "x", "new_string": "y"}),
        call("Glob", {"pattern": "**/*.ex", "directory": "lib"}),
        call("search", {"paths": ["config/dev.exs", "README"]}),
        call("Bash", {"command": "ls", "description": "list the README"}),
    ]
    assert of_kind("path", messages) == [
        "notes.weird",
        "CHANGELOG",
        "lib",
        "config/dev.exs",
        "README",
    ]


def test_attribute_access_is_not_a_path() -> None:
    code = "x = self.total + order.amount\nresult = np.sum(values)\nos.environ.get('HOME')"
    assert of_kind("path", [tool(code)]) == []


def test_closing_tags_of_an_agents_context_are_not_paths() -> None:
    # Codex CLI opens every session with XML-tagged context; its closing tags once entered the
    # ledger as the paths /environment_context, /cwd, /filesystem.
    text = (
        "<environment_context>\n  <cwd>/work/repo</cwd>\n  <filesystem>workspace-write</filesystem>"
        "\n</environment_context>\n<permission_profile>on-request</permission_profile>\n"
        "Fix src/app.py and keep <b>docs/guide.md</b> in step."
    )
    assert of_kind("path", [said(text)]) == ["/work/repo", "src/app.py", "docs/guide.md"]
