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
_SPACED_UNITS = (
    r"(?i:[kmgtp]i?b)|bytes?|ms|µs|ns|secs?|seconds?|minutes?|mins?|hours?|hrs?|days?|%"
    r"|tokens?|requests?|req/s|rps|qps|rpm|tpm|tok/s|ops/s|[kMG]?Hz|fps"
)
_QTY_RE = re.compile(
    r"(?<![\w.\\/])(\d{1,15}(?:,\d{3})*(?:\.\d{1,6})?[kKM]?)"
    rf"(?:[ \t]?(?:{_SPACED_UNITS})|(s|h|B))(?![\w/]|\.\w)"
)
_NOT_SECONDS_RE = re.compile(r"1[89]\d0|20\d0|[45]00")  # decades, HTTP "500s"


def _path(token: str) -> str | None:
    """``token`` as a file path, or None. Precise rather than greedy:

    a ``/``, ``./``, ``../``, ``~/``, drive or UNC prefix makes a path; otherwise ``a/b.ext``
    (extension with a letter) or ``a/b/c``; ``a\\b`` needs an extension; a bare name needs a
    known source extension, a dotfile name or a name like ``Makefile``. Never a URL, never
    all-numeric parts (``1/2``, ``2024/01/02``), never ``and/or``. ``:line[:col]`` is dropped.
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
    if prefix:
        ok = prefix != "/" or len(body) >= 2
    elif len(parts) == 1:
        bare_ext = ext is not None and has_ext and ext[1].casefold() in _BARE_EXTS
        ok = bare_ext or body in _BARE_NAMES or _DOTFILE_RE.fullmatch(body) is not None
    elif "\\" in body:
        ok = has_ext
    else:
        ok = has_ext or len(parts) >= 3
    return token if ok else None


def _commit(token: str, commit_context: bool) -> bool:
    if not _HEX_RE.fullmatch(token) or token.isdigit() or not any(c.isdigit() for c in token):
        return False
    return len(token) <= 12 or len(token) == 40 or commit_context


def _quantity(line: str, match: re.Match[str]) -> bool:
    if match[2] == "s" and _NOT_SECONDS_RE.fullmatch(match[1]):
        return False
    before = line[max(0, match.start() - 4) : match.start()].rstrip(" ")
    after = line[match.end() : match.end() + 4].lstrip(" ")
    return not (before.endswith("[") and after.startswith("]"))  # pytest's "[ 50%]"
