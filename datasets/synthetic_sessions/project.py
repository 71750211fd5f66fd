"""The concrete names of one synthetic coding session: repository, files, identifiers, errors.

A ``Project`` is drawn from a ``random.Random`` and holds every string the session plants, spelt
for its language (snake, camel or Pascal case; pytest, jest, ``go test`` or cargo conventions), so
the session builder and the renderers never invent a name the gold facts do not know about.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

LANGUAGES = ("python", "typescript", "go", "rust")
"""The languages a synthetic session can be in."""


@dataclass(frozen=True)
class Domain:
    """A bug scenario independent of language; names are snake_case, classes PascalCase."""

    area: str
    module: str
    cls: str
    func: str
    field: str
    test1: str
    test2: str
    config_key: str
    config_values: tuple[int, ...]
    message: str
    symptom: str
    crash_field: str
    bug: str


DOMAINS: tuple[Domain, ...] = (
    Domain(
        *("net", "retry", "RetryPolicy", "next_delay", "max_delay_ms"),
        *("backoff_is_capped", "jitter_never_negative", "max_delay_ms"),
        (5000, 15000, 30000, 60000),
        "backoff delay {got}ms exceeds max_delay_ms {value}",
        "retries back off far past the configured cap, so a flaky upstream stalls requests "
        "for minutes",
        "jitter_source",
        "the delay grows exponentially and the cap is only logged, never applied",
    ),
    Domain(
        *("api", "pagination", "PageCursor", "next_page", "page_size"),
        *("last_page_includes_final_item", "empty_listing_has_no_cursor", "default_page_size"),
        (20, 25, 50, 100),
        "expected {value} items on the last page, got {got}",
        "the last item of a listing is dropped whenever the total is an exact multiple of the "
        "page size",
        "cursor",
        "the final page is sliced with < instead of <=, an off-by-one",
    ),
    Domain(
        *("storage", "ttl_cache", "TtlCache", "get_or_load", "ttl_seconds"),
        *("expired_entry_is_reloaded", "loader_error_is_not_cached", "cache_ttl_seconds"),
        (30, 60, 300, 900),
        "stale entry returned {got}s after expiry (ttl {value}s)",
        "stale values keep being served after their TTL expires",
        "loader",
        "expiry is compared against the insert time instead of the expiry time",
    ),
    Domain(
        *("auth", "token_refresh", "TokenRefresher", "refresh_if_expired", "refresh_skew_seconds"),
        *("refreshes_inside_skew_window", "concurrent_refresh_is_single_flight"),
        "refresh_skew_seconds",
        (30, 60, 90, 120),
        "token refreshed {got}s after expiry (skew window {value}s)",
        "API calls fail with 401 for a few seconds every hour because access tokens are "
        "refreshed only after they expire",
        "expires_at",
        "the skew is subtracted from now instead of from expires_at",
    ),
    Domain(
        *("middleware", "rate_limit", "TokenBucket", "try_acquire", "requests_per_second"),
        *("bucket_refills_over_time", "burst_is_bounded", "requests_per_second"),
        (5, 10, 20, 50),
        "bucket refilled 0 tokens after {got}ms (rate {value}/s)",
        "after a burst the rate limiter never lets requests through again",
        "last_refill",
        "integer division truncates the refill to zero for intervals under one second",
    ),
    Domain(
        *("reports", "csv_export", "CsvExporter", "write_rows", "max_rows_per_file"),
        *("quoted_delimiter_keeps_columns", "splits_at_max_rows", "max_rows_per_file"),
        (10000, 50000, 250000),
        "row {got} has 7 columns, expected 6 (max_rows_per_file {value})",
        "exported CSV files have shifted columns whenever a field contains the delimiter",
        "writer",
        "fields are joined without quoting",
    ),
    Domain(
        *("webhooks", "signatures", "SignatureVerifier", "verify_signature", "tolerance_seconds"),
        *("accepts_signature_within_tolerance", "rejects_replayed_timestamp"),
        "signature_tolerance_seconds",
        (120, 300, 600),
        "signature rejected (timestamp skew {got}s, tolerance {value}s)",
        "valid webhooks are rejected with 401 when the sender's clock is slightly behind ours",
        "secret",
        "the skew check is one-sided, so any negative skew is rejected",
    ),
    Domain(
        *("jobs", "cron_schedule", "CronSchedule", "next_run", "tick_interval_ms"),
        *("next_run_respects_timezone", "dst_gap_skips_missing_hour", "tick_interval_ms"),
        (250, 500, 1000),
        "next run off by {got}s (tick_interval_ms {value})",
        "nightly jobs fire an hour early after the daylight-saving change",
        "timezone",
        "local times are converted with the UTC offset captured at startup",
    ),
)

_ORGS = ("northwind", "acme", "lumen", "tidepool", "quarry", "brightline", "oakridge", "fernhill")
_PRODUCTS = (
    *("ledger-sync", "fleet-api", "orbit", "paystream", "inkwell", "harbor", "relay"),
    *("beacon", "switchyard", "parcel", "meridian", "lantern", "tally", "drift"),
)


def camel(name: str) -> str:
    """``snake_case`` → ``camelCase``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def pascal(name: str) -> str:
    """``snake_case`` → ``PascalCase``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@dataclass(frozen=True)
class Project:
    """Every planted string of one session, spelt for its language."""

    language: str
    domain: Domain
    repo: str
    package: str
    main_path: str
    test_path: str
    config_path: str
    manifest_path: str
    other_paths: tuple[str, ...]
    cls: str
    func: str
    field: str
    crash_field: str
    test1: str
    test2: str
    test1_id: str
    test2_id: str
    test_cmd: str
    suite_cmd: str
    lint_cmd: str
    config_key: str
    config_value: int
    port: int
    got: int
    assert_error: str
    crash_error: str
    compile_error: str
    compile_line: int
    version_constraint: str
    api_constraint: str
    mid_constraint: str
    decision: str
    open_work: str
    issue: int
    version: str

    @property
    def lang_label(self) -> str:
        """The language as people write it."""
        return {"python": "Python", "typescript": "TypeScript", "go": "Go", "rust": "Rust"}[
            self.language
        ]

    @property
    def runtime_version(self) -> str:
        """The language/runtime version the user's constraint names (``3.9``, ``18``, ...)."""
        match = re.search(r"\d+(?:\.\d+)?", self.version_constraint)
        return match.group(0) if match else ""

    def name(self, snake: str, *, exported: bool = False) -> str:
        """An identifier in this language's style."""
        if self.language == "typescript":
            return camel(snake)
        if self.language == "go":
            return pascal(snake) if exported else camel(snake)
        return snake


def _paths(language: str, domain: Domain, package: str) -> tuple[str, str, str, str, str]:
    """(source dir, main path, test path, config path, manifest path)."""
    area, module = domain.area, domain.module
    if language == "python":
        src = f"src/{package}/{area}"
        return (
            *(src, f"{src}/{module}.py", f"tests/{area}/test_{module}.py"),
            *("config/settings.toml", "pyproject.toml"),
        )
    if language == "typescript":
        src = f"src/{area}"
        name = camel(module)
        return (
            src,
            f"{src}/{name}.ts",
            f"{src}/{name}.test.ts",
            "config/default.json",
            ("package.json"),
        )
    if language == "go":
        src = f"internal/{area}"
        return src, f"{src}/{module}.go", f"{src}/{module}_test.go", "config/config.yaml", "go.mod"
    src = f"src/{area}"
    return (
        src,
        f"{src}/{module}.rs",
        f"tests/{module}_tests.rs",
        "config/default.toml",
        ("Cargo.toml"),
    )


_SIBLINGS = ("client", "config", "errors", "metrics", "models", "service", "handlers", "util")


def make_project(rng: random.Random, language: str, domain: Domain) -> Project:
    """Draw the names and numbers of one session."""
    org, product = rng.choice(_ORGS), rng.choice(_PRODUCTS)
    package = product.replace("-", "_")
    src, main_path, test_path, config_path, manifest = _paths(language, domain, package)
    ext = main_path.rsplit(".", 1)[1]
    siblings = rng.sample(_SIBLINGS, 5)
    style = camel if language == "typescript" else (lambda s: s)
    others = tuple(f"{src}/{style(name)}.{ext}" for name in siblings[:3]) + tuple(
        f"{src.rsplit('/', 1)[0]}/{style(name)}.{ext}" for name in siblings[3:]
    )
    value = rng.choice(domain.config_values)
    if "exceeds" in domain.message:
        got = value * rng.choice((2, 3, 4)) + rng.randint(1, 97)
    elif "items" in domain.message:
        got = value - 1
    else:
        got = rng.randint(3, 97)
    message = domain.message.format(got=got, value=value)
    func, field, crash = domain.func, domain.field, domain.crash_field
    test1, test2 = domain.test1, domain.test2
    line = rng.randint(60, 180)
    issue = rng.randint(120, 4800)
    minor = rng.randint(1, 14)
    version = f"{rng.randint(0, 3)}.{minor}.{rng.randint(1, 9)}"
    if language == "python":
        test1_id, test2_id = f"{test_path}::test_{test1}", f"{test_path}::test_{test2}"
        test_cmd, suite_cmd = f"python -m pytest {test_path} -x -q", "python -m pytest -q"
        lint_cmd = f"mypy src/{package}"
        assert_error = f"AssertionError: {message}"
        crash_error = f"AttributeError: 'NoneType' object has no attribute '{crash}'"
        compile_error = (
            f'{main_path}:{line}: error: Argument 1 to "{func}" of "{domain.cls}" has '
            'incompatible type "float"; expected "int"  [arg-type]'
        )
        version_constraint = f"must stay compatible with Python 3.{rng.choice((8, 9))}"
        api_constraint = "do not change public function signatures"
    elif language == "typescript":
        test1_id = f"{domain.cls} › {test1.replace('_', ' ')}"
        test2_id = f"{domain.cls} › {test2.replace('_', ' ')}"
        test_cmd, suite_cmd, lint_cmd = f"npx jest {test_path}", "npm test", "npx tsc --noEmit"
        assert_error = f"AssertionError [ERR_ASSERTION]: {message}"
        crash_error = f"TypeError: Cannot read properties of undefined (reading '{camel(crash)}')"
        compile_error = (
            f"{main_path}({line},{rng.randint(9, 40)}): error TS2345: Argument of type 'string' "
            "is not assignable to parameter of type 'number'."
        )
        version_constraint = f"must keep working on Node {rng.choice((16, 18))}"
        api_constraint = "do not change the exported function signatures"
    elif language == "go":
        test1_id, test2_id = f"Test{pascal(test1)}", f"Test{pascal(test2)}"
        test_cmd = f"go test ./{src}/ -run {test1_id} -v"
        suite_cmd, lint_cmd = "go test ./...", "go vet ./..."
        assert_error = message
        crash_error = "panic: runtime error: invalid memory address or nil pointer dereference"
        compile_error = (
            f"{main_path}:{line}:{rng.randint(9, 40)}: cannot use {camel(field)} (variable of "
            f"type int) as time.Duration value in argument to p.{pascal(func)}"
        )
        version_constraint = f"must still build with Go 1.{rng.choice((20, 21))}"
        api_constraint = "do not change exported function signatures"
    else:
        test1_id, test2_id = test1, test2
        test_cmd = f"cargo test --test {domain.module}_tests"
        suite_cmd, lint_cmd = "cargo test --workspace", "cargo clippy --all-targets -- -D warnings"
        assert_error = message
        crash_error = "called `Option::unwrap()` on a `None` value"
        compile_error = "error[E0308]: mismatched types"
        version_constraint = f"must build on Rust 1.{rng.choice((65, 70, 74))} (our MSRV)"
        api_constraint = "keep the public API of the crate unchanged"
    names = {"python": func, "rust": func, "typescript": camel(func), "go": pascal(func)}
    lang_func = names[language]
    decision = rng.choice(
        (
            f"we'll keep the v1 {lang_func} API and add a shim",
            f"fix it inside {domain.cls} rather than in the callers",
            f"leave the {domain.config_key} default alone and clamp inside {lang_func}",
        )
    )
    mid_constraint = rng.choice(
        (
            "don't touch the migrations under db/migrations/",
            f"don't edit {test_path} beyond adding new tests",
            "leave the generated client in gen/ alone",
            "no drive-by refactors in this change",
        )
    )
    open_work = rng.choice(
        (
            "still need to update CHANGELOG.md",
            f"still need to bump the version to {version} in {manifest}",
            f"still need to document {domain.config_key} in docs/configuration.md",
        )
    )
    return Project(
        language=language,
        domain=domain,
        repo=f"{org}/{product}",
        package=package,
        main_path=main_path,
        test_path=test_path,
        config_path=config_path,
        manifest_path=manifest,
        other_paths=others,
        cls=domain.cls,
        func=lang_func,
        field={"typescript": camel(field), "go": camel(field)}.get(language, field),
        crash_field=crash,
        test1=test1,
        test2=test2,
        test1_id=test1_id,
        test2_id=test2_id,
        test_cmd=test_cmd,
        suite_cmd=suite_cmd,
        lint_cmd=lint_cmd,
        config_key=domain.config_key,
        config_value=value,
        port=rng.choice((3000, 5000, 8000, 8080, 8081, 8443, 9090, 4000)) + rng.choice((0, 1, 7)),
        got=got,
        assert_error=assert_error,
        crash_error=crash_error,
        compile_error=compile_error,
        compile_line=line,
        version_constraint=version_constraint,
        api_constraint=api_constraint,
        mid_constraint=mid_constraint,
        decision=decision,
        open_work=open_work,
        issue=issue,
        version=version,
    )
