"""What text is a fact of which kind: the tests for a path, a commit and a quantity, which
extraction applies and matching reuses for its leniencies (error lines are ``errors``', commands
``commands'``). Every regex is linear, and line rules only read a line's head."""

from __future__ import annotations

import re

_HEX_RE = re.compile(r"[0-9a-f]{7,40}")
_PATH_RE = re.compile(
    r"([A-Za-z]:[\\/]|\\\\|~[\\/]|(?:\.\.?[\\/])+|[\\/])?((?:[\w.@+\-]+[\\/])*[\w.@+\-]+)"
)
_SEP_SPLIT_RE = re.compile(r"[\\/]")
_LINE_SUFFIX_RE = re.compile(r"(?::\d+){1,2}$")
_EXT_RE = re.compile(r"[^.]\.([A-Za-z0-9]{1,10})$")
_DOTFILE_RE = re.compile(r"\.[a-z][a-z0-9_.\-]{1,30}")
# Extensions that make a bare name (no directory) a file; a path with a directory may have any.
# None that commonly reads as an attribute (``np.sum``, ``this.props``, ``self.key``; so
# ``go.mod`` is a name below) and no one letter but c, h and r.
_EXT_WORDS = """
py pyi pyx pxd ipynb js mjs cjs jsx ts tsx mts cts vue svelte astro json jsonc json5 jsonl ndjson
yaml yml toml ini cfg conf env md mdx rst adoc txt csv tsv xml xsd xsl html htm xhtml css scss
sass less styl sh bash zsh fish ps1 psm1 bat c h cc cpp cxx hpp hh hxx ipp inl cu cuh m4 rs go
java kt kts scala groovy gradle sbt clj cljs cljc edn rb erb rake gemspec haml slim php phtml
twig pl pm lua swift cs csx csproj fsproj vbproj sln cshtml razor fs fsx fsi vb r jl dart ex exs
eex heex leex erl hrl hs lhs cabal elm purs ml mli sql prisma graphql gql proto thrift avsc tf
tfvars hcl nix zig nim sv vhd vhdl asm wasm cmake mk bzl bazel ninja jinja j2 tmpl tpl hbs
mustache ejs pug liquid tex bib lock lockb log diff patch db sqlite sqlite3 pem crt gz tgz bz2 xz
zst zip tar jar war whl egg so dylib dll exe pdf svg png jpg jpeg gif webp ico plist xcconfig
pbxproj storyboard xib entitlements
"""
_BARE_EXTS = frozenset(_EXT_WORDS.split())
_NAME_WORDS = """
Dockerfile Containerfile Makefile GNUmakefile Justfile Procfile Gemfile Rakefile Jenkinsfile
Vagrantfile Pipfile Podfile Brewfile Cartfile Berksfile Guardfile Capfile Fastfile Snakefile
Tiltfile Earthfile go.mod go.sum go.work CMakeLists.txt
"""
_BARE_NAMES = frozenset(_NAME_WORDS.split())
_DOTFILE_WORDS = """
.env .envrc .gitignore .gitattributes .gitmodules .gitkeep .github .gitlab .dockerignore
.editorconfig .npmrc .nvmrc .yarnrc .babelrc .eslintrc .prettierrc .pylintrc .coveragerc .flake8
.bashrc .zshrc .profile .netrc .vscode .idea .venv .tox .beads .python-version .tool-versions
.node-version .ruby-version .clang-format .clang-tidy .mailmap .htaccess .terraform .cargo
.config .ssh .aws .kube .devcontainer .husky .circleci .pytest_cache .mypy_cache .ruff_cache
"""
_DOTFILES = frozenset(_DOTFILE_WORDS.split())
_ROOT_WORDS = """
tmp etc usr var opt home bin sbin lib lib64 root srv mnt dev proc sys app workspace testbed repo
src data code work workdir build dist
"""
_ROOTS = frozenset(_ROOT_WORDS.split())
"""Directories a one-part rooted path may name (``/tmp``); ``/status`` is a URL's fragment."""
_SPACED_UNITS = (
    r"(?i:[kmgtp]i?b)|bytes?|ms|µs|ns|secs?|seconds?|minutes?|mins?|hours?|hrs?|days?|%"
    r"|tokens?|requests?|req/s|rps|qps|rpm|tpm|tok/s|ops/s|[kMG]?Hz|fps"
)
_QTY_RE = re.compile(
    r"(?<![\w.\\/])(\d{1,15}(?:,\d{3})*(?:\.\d{1,6})?[kKM]?)"
    rf"(?:[ \t]?(?:{_SPACED_UNITS})|(s|h|B))(?![\w/]|\.\w)"
)
_DURATION_RE = re.compile(r"(?:\d|\s)(?:s|ms|µs|ns|secs?|seconds?|minutes?|mins?)$")
_NOT_SECONDS_RE = re.compile(r"1[89]\d0|20\d0|[45]00")  # decades, HTTP "500s"


def _path(token: str) -> str | None:
    """``token`` as a file path, or None. Precise rather than greedy:

    a ``./``, ``../``, ``~/`` or drive prefix makes a path; ``/`` does with two parts, an
    extension or a known root (``/tmp``); a ``\\`` or UNC prefix with two parts and an
    extension (``\\w+`` and ``\\nDone`` are escapes); otherwise ``a/b.ext``
    (extension with a letter) or ``a/b/c``; ``a\\b`` needs an extension; a bare name needs a
    known source extension, a dotfile name (``_dotfile``) or a name like ``Makefile``. Never a
    URL, never all-numeric parts (``1/2``, ``2024/01/02``), never ``and/or``. ``:line[:col]``
    is dropped.
    """
    if "://" in token:
        return None
    token = _LINE_SUFFIX_RE.sub("", token)
    if len(token) > 1:
        token = token.rstrip("/\\")
    match = _PATH_RE.fullmatch(token)
    if match is None:
        return None
    prefix, body = match[1], match[2]
    parts = _SEP_SPLIT_RE.split(body)
    if not any(c.isalpha() for c in body) or all(p[:1].isdigit() for p in parts):
        return None
    ext = _EXT_RE.search(parts[-1])
    has_ext = ext is not None and any(c.isalpha() for c in ext[1])
    if prefix in ("\\", "\\\\"):
        ok = has_ext and len(parts) >= 2  # ``\w+``, ``\nDone``, ``\\u2028``: escapes, not paths
    elif prefix == "/" and len(parts) == 1:
        ok = has_ext or body in _ROOTS  # ``/status``, ``/h1``: a URL's or a tag's fragment
    elif prefix:
        ok = True
    elif len(parts) == 1:
        bare_ext = ext is not None and has_ext and ext[1].casefold() in _BARE_EXTS
        ok = bare_ext or body in _BARE_NAMES or _dotfile(body)
    elif "\\" in body:
        ok = has_ext
    else:
        ok = has_ext or len(parts) >= 3
    return token if ok else None


def _dotfile(name: str) -> bool:
    """A bare dot-name that is a file: a known one (``.gitignore``, ``.env``), an ``rc`` or
    ``ignore`` file, or one with a known extension (``.eslintrc.json``); never a bare extension
    (``.sh``) or an attribute (``.order_by``, ``.netloc``)."""
    if _DOTFILE_RE.fullmatch(name) is None:
        return False
    if name in _DOTFILES or name.endswith(("rc", "ignore")):
        return True
    last = name.rsplit(".", 1)[-1]
    return name.count(".") >= 2 and last in _BARE_EXTS


def _commit(token: str, commit_context: bool) -> bool:
    if not _HEX_RE.fullmatch(token) or token.isdigit() or not any(c.isdigit() for c in token):
        return False
    return len(token) <= 12 or len(token) == 40 or commit_context


def _quantity(line: str, match: re.Match[str]) -> bool:
    if match[2] == "s" and _NOT_SECONDS_RE.fullmatch(match[1]):
        return False
    if "." in match[1] and _DURATION_RE.search(match[0]):
        return False  # a measured duration ("0.3s", "1.25 sec"): a timing, not a setting
    before = line[max(0, match.start() - 4) : match.start()].rstrip(" ")
    after = line[match.end() : match.end() + 4].lstrip(" ")
    return not (before.endswith("[") and after.startswith("]"))  # pytest's "[ 50%]"
