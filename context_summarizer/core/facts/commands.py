"""Where a message's text holds commands: fenced shell blocks (``shell_commands``), code spans
that start with a known command-line tool (``span_command``), and prompt lines (``$ cmd``,
PowerShell's ``PS C:\\src> cmd``: ``prompt_command``). Tool-call arguments (``command``/``cmd``)
are read by extraction itself.

``COMMAND_WORDS`` names the tools of every common ecosystem (build systems, package managers,
language toolchains and test runners, containers, version control, the shell's own), so that a
span such as ``mix test test/a_test.exs`` or ``./gradlew test`` reads as a command while prose
such as "make sure" or a lone `make` does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .errors import _LINE_HEAD, _bound

_WORDS = """
make gmake cmake ctest ninja meson bazel bazelisk buck2 just task mix iex elixir elixirc erl
erlc rebar3 bundle rake rails rspec ruby gem irb gradle gradlew mvn mvnw ant sbt lein clj java
javac kotlin kotlinc scala cargo rustc rustup rustfmt clippy-driver go gofmt golangci-lint npm
npx pnpm pnpx yarn bun bunx deno node tsc tsx ts-node jest vitest mocha playwright cypress eslint
prettier biome webpack vite next nuxt pip pip3 pipx uv uvx poetry pdm hatch conda mamba python
python3 py pytest tox nox ruff mypy pyright black flake8 pylint isort coverage django-admin
alembic dotnet nuget msbuild swift swiftc xcodebuild xcrun pod carthage flutter dart composer
php phpunit artisan perl prove cpanm R Rscript julia stack cabal ghc ghci zig nim crystal
docker podman docker-compose kubectl helm terraform tofu ansible ansible-playbook vagrant git gh
hg svn curl wget ssh scp rsync tar unzip gcc g++ cc c++ clang clang++ ld valgrind gdb lldb strace
sudo apt apt-get brew yum dnf pacman apk systemctl journalctl cd ls cat grep rg find fd sed awk
head tail echo printf export source chmod chown mkdir rm cp mv ln touch diff patch bash sh zsh
fish pwsh env time timeout xargs nl wc sort uniq jq yq sqlite3 psql mysql redis-cli
"""
COMMAND_WORDS = frozenset(_WORDS.split())
"""Command-line tools whose name starts a command (``./name`` and ``bin/name`` too)."""

_SHELL_FENCE_RE = re.compile(
    r"^[ \t]*```[ \t]*(bash|sh|shell|zsh|console|shell-session|powershell|pwsh|ps1|cmd|bat)?"
    r"[ \t]*$"
)
_FENCE_END_RE = re.compile(r"^[ \t]*```[ \t]*$")
_ANY_FENCE_RE = re.compile(r"^[ \t]*```")
_HEREDOC_RE = re.compile(r"<<-?[ \t]*(['\"]?)([A-Za-z_]\w*)\1")
_ENV_ASSIGN_RE = re.compile(r"[A-Za-z_]\w*=\S*")
_DOLLAR_PROMPT_RE = re.compile(r"\s*\$\s+([^\s\d$].*)")
_PS_PROMPT_RE = re.compile(r"\s*PS [^>\n]{1,200}>\s+(\S.*)")


def _first_word(command: str) -> str:
    words = command.split()
    while words and _ENV_ASSIGN_RE.fullmatch(words[0]):
        words = words[1:]  # FOO=1 BAR=2 cmd
    if not words:
        return ""
    word = words[0]
    for prefix in ("./", "bin/", ".venv/bin/", "venv/bin/"):
        word = word.removeprefix(prefix)
    return word


def starts_with_command(text: str) -> bool:
    """Whether ``text`` starts with a known tool (``COMMAND_WORDS``, after ``VAR=x`` words)."""
    return _first_word(text) in COMMAND_WORDS


def span_command(content: str) -> str | None:
    """A code span's text as a command: two words at least, the first a known tool."""
    content = content.strip()
    if len(content.split()) >= 2 and starts_with_command(content):
        return _bound(content)
    return None


def prompt_command(head: str) -> str | None:
    """The command on a prompt line (``$ make test``, ``PS C:\\src> dotnet build``), or None."""
    match = _DOLLAR_PROMPT_RE.match(head) or _PS_PROMPT_RE.match(head)
    return None if match is None else _bound(match[1])


def _odd_quotes(line: str) -> bool:
    """Whether a line leaves a ``"`` or ``'`` string open (backslash escapes aside)."""
    line = line.replace("\\\\", "").replace('\\"', "").replace("\\'", "")
    in_quote = ""
    for char in line:
        if in_quote:
            if char == in_quote:
                in_quote = ""
        elif char in "\"'":
            in_quote = char
    return bool(in_quote)


def shell_commands(text: str) -> Iterator[tuple[int, str]]:
    """The commands in the fenced shell blocks of ``text``, with their offsets.

    In a block labelled as shell (``bash``, ``sh``, ``console``, ``powershell``, ...) every line
    that starts a command is one: not a comment, not a heredoc's body, not inside a string left
    open by an earlier line, not the continuation of a line ending in ``\\``. In an unlabelled
    block only lines that start with a known tool are. ``console`` blocks are read by their
    ``$`` prompts instead (as every line is, outside fences too).
    """
    offset = 0
    fence: str | None = None  # the open block's label ("" when unlabelled), None outside one
    heredoc: str | None = None
    in_string = continued = False
    for line in text.split("\n"):
        head = line[:_LINE_HEAD]
        if fence is None:
            opened = _SHELL_FENCE_RE.match(head)
            if opened is not None:
                fence, heredoc, in_string, continued = opened[1] or "", None, False, False
            elif _ANY_FENCE_RE.match(head):
                fence = "-"  # a block in another language: skipped to its end
        elif _FENCE_END_RE.match(head):
            fence = None
        elif fence in ("-", "console", "shell-session"):
            pass
        elif heredoc is not None:
            heredoc = None if head.strip() == heredoc else heredoc
        elif in_string:
            in_string = in_string != _odd_quotes(head)
        elif continued:
            continued = head.rstrip().endswith("\\")
        else:
            command = head.strip()
            if command and not command.startswith("#") and (fence or starts_with_command(command)):
                yield offset + line.find(command[0]), _bound(command)
            marker = _HEREDOC_RE.search(head)
            heredoc = marker[2] if marker is not None else None
            in_string = heredoc is None and _odd_quotes(head)
            continued = head.rstrip().endswith("\\")
        offset += len(line) + 1
