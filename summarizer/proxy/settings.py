"""The proxy's settings: one model, read from flags, ``SUMMARIZER_*`` environment variables and
the ``--config`` file.

Precedence: a command-line flag, then ``SUMMARIZER_<FIELD>``, then the config file
(``config_file``), then the default. The environment is injectable
(``Settings.from_env(environ)``) so tests never touch ``os.environ``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.config import CompactionConfig, ConfigurationModel
from ..core.errors import ConfigurationError
from .config_file import (
    COMPACTION_SETTINGS,
    CONFIG_ENV,
    ModelEntry,
    blame_file,
    check_upstream_url,
    read_config_file,
)
from .cross_site import normalize_origin
from .prepare_default import with_prepare_default

DEFAULT_UPSTREAM = "https://api.openai.com/v1"
ENV_PREFIX = "SUMMARIZER_"


def default_db_path() -> Path:
    """The SQLite file in the platform's user state folder (e.g. ``~/.local/state/summarizer``)."""
    from platformdirs import user_state_path

    return user_state_path("summarizer", appauthor=False) / "checkpoints.db"


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def hash_key(key: str) -> str:
    """``sha256:<hex>`` of a client key."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def key_digest(key: str) -> str:
    """A configured client key as a digest: hashed, unless it is already a ``sha256:<hex>``."""
    return key if _DIGEST.fullmatch(key) else hash_key(key)


class Settings(ConfigurationModel):
    """Everything ``summarizer serve`` and ``create_app`` need; invalid values raise
    ``ConfigurationError``.

    ``Settings(context_window=...)`` and the other ``COMPACTION_SETTINGS`` set fields of
    ``compaction``; ``Settings(compaction=CompactionConfig(...))`` gives all of it at once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    _described_as = "settings"
    _flattened = frozenset({"compaction"})

    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    upstream: str = DEFAULT_UPSTREAM
    """Base URL of the OpenAI-compatible upstream, ending in ``/v1`` (or the provider's
    equivalent)."""
    upstream_api_key: SecretStr | None = None
    """When set, sent upstream instead of the client's own ``Authorization``."""
    db: Path | None = None
    """SQLite checkpoint file; None means ``default_db_path()``; ``:memory:`` keeps nothing."""
    store: str | None = None
    """A ``redis://`` (or ``rediss://``) URL: checkpoints, leases and calibration in Redis,
    shared by several replicas. Not together with ``db``."""
    lease_ttl: float = Field(default=30.0, gt=0)
    """Seconds a session's compaction lease outlives a replica that stopped renewing it (died
    mid-compaction): how long that session waits before another replica takes over."""
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    """How the proxy compacts: the configuration the ``ContextManager`` gets."""
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    upstream_timeout: float = Field(default=600.0, gt=0)
    """Seconds to wait for the upstream (connect, and between bytes of a reply)."""
    keepalive_interval: float = Field(default=5.0, gt=0)
    """Seconds between SSE comment keepalives while a compaction holds a streamed answer."""
    idle_connection_timeout: int = Field(default=65, gt=0)
    """Seconds an idle client connection stays open. Longer than clients' own idle expiry
    (httpx, under the openai SDK, drops a connection after 5 s), so that a client never sends
    on a connection the proxy is closing at that moment."""
    sessions_api: Literal["keyed", "all", "off"] = "keyed"
    """``GET /v1/summarizer/sessions/{id}`` and ``/ui``'s data: ``keyed`` answers only requests
    with a credential (each reads its own sessions), ``all`` keyless ones too (they all share one
    namespace), ``off`` answers 404 to everyone."""
    client_keys: frozenset[str] = frozenset()
    """The keys a client must send one of (none: any client may use the proxy). Given as keys
    (``SUMMARIZER_CLIENT_KEYS`` is comma-separated) and held only as their ``sha256:<hex>``
    digests; a value already of that form is taken as a digest."""
    allow_origins: frozenset[str] = frozenset()
    """Web origins (``scheme://host[:port]``) whose pages may use the proxy, with CORS answers;
    a page of any other origin is refused (``proxy.cross_site``). ``SUMMARIZER_ALLOW_ORIGINS``
    is comma-separated."""
    body_read_timeout: float = Field(default=30.0, gt=0)
    """Seconds to wait for each next piece of a request body before answering 408."""
    responses_upstream: Literal["responses", "chat"] = "responses"
    """What serves ``/v1/responses``: an upstream with the Responses API (``responses``), or a
    chat-completions-only one (``chat``: vLLM, llama.cpp, Ollama), to which the proxy translates
    each request and from which it builds the Response (see the README for what is lost)."""
    fast_path: bool = True
    """Read a chat request that extends its conversation's previous body from its new bytes
    only (``proxy.fast_path``), and stream such a request upstream as its bytes arrive, proving
    it before its last byte goes (``proxy.lane``); off, every body is read whole, then parsed
    and sent. Either way the same bytes go upstream."""
    record: bool = False
    """Keep each session's latest conversation (credentials and credential-shaped strings
    redacted) in the store, for ``summarizer export`` and ``/ui``. Off by default: without it
    the store keeps counts and summaries, never the conversation."""
    ui: bool = False
    """Serve the read-only web page ``/ui`` (sessions, token chart, each summary next to what it
    replaced), under the same credential rules as ``sessions_api``. Off: ``/ui`` is 404."""
    cache_breakpoints: Literal["managed", "client"] = "managed"
    """Anthropic prompt-cache breakpoints on ``/v1/messages``: ``managed`` places them (end of
    system, the summary, the newest message) when a request carries none; ``client`` leaves
    every request's breakpoints as the client set them. A client's own are always kept."""
    models: tuple[ModelEntry, ...] = ()
    """Models served their own way (the config file's ``[[models]]``): upstream, key, window,
    summary model and thresholds. A model none of them names uses the settings above."""

    def __init__(self, /, **values: Any) -> None:
        """``values`` are the fields above, or the ``COMPACTION_SETTINGS`` given flat."""
        # Declared so type checkers accept the flat compaction keywords, which are not fields.
        super().__init__(**values)

    @field_validator("upstream")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return check_upstream_url(value)

    @field_validator("store")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://")):
            raise ValueError(
                "store must be a redis:// or rediss:// URL (give a SQLite file with db / --db)"
            )
        return value

    @model_validator(mode="after")
    def _one_store(self) -> Settings:
        if self.db is not None and self.store is not None:
            raise ValueError(
                "db and store are both set: give a SQLite file (db, --db) or a Redis URL "
                "(store, --store), not both"
            )
        return self

    @field_validator("client_keys", mode="before")
    @classmethod
    def _digest_client_keys(cls, value: Any) -> Any:
        return _string_set(value, "client keys", lambda key: key_digest(key.strip()))

    @field_validator("allow_origins", mode="before")
    @classmethod
    def _normalize_origins(cls, value: Any) -> Any:
        return _string_set(value, "origins", normalize_origin)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _nest_compaction_settings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        given = {name: data[name] for name in COMPACTION_SETTINGS if name in data}
        if not given:  # drafting ahead of time is on unless turned off (``prepare_default``)
            return {**data, "compaction": with_prepare_default(data.get("compaction"))}
        if "compaction" in data:
            raise ValueError(
                f"set {', '.join(given)} in compaction=, or as settings without it, not both"
            )
        rest = {name: value for name, value in data.items() if name not in given}
        return {**rest, "compaction": with_prepare_default(given)}

    @model_validator(mode="after")
    def _models_fit(self) -> Settings:
        problems: list[tuple[str, str]] = []
        seen: dict[str, int] = {}
        for index, entry in enumerate(self.models):
            if entry.name in seen:
                problems.append(
                    (
                        f"models[{index}].name",
                        f"{entry.name!r} is already the name of models[{seen[entry.name]}]",
                    )
                )
            seen.setdefault(entry.name, index)
            try:
                entry.compaction(self.compaction)
            except ConfigurationError as exc:
                problems.extend(
                    (f"models[{index}].{f}" if f else f"models[{index}]", p)
                    for f, p in exc.problems
                )
        if problems:
            listed = "; ".join(f"{field}: {problem}" for field, problem in problems)
            raise ConfigurationError(listed, problems=tuple(problems))
        return self

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        config_file: str | Path | None = None,
        **overrides: Any,
    ) -> Settings:
        """Settings from flags (``overrides``), ``SUMMARIZER_*`` variables and the config file,
        in that order of precedence.

        ``config_file`` (``--config``) falls back to ``SUMMARIZER_CONFIG``. The upstream falls
        back to ``OPENAI_BASE_URL`` (below the config file) before the OpenAI default. Overrides
        that are None are ignored, so unset flags do not mask the environment. An invalid value
        raises ``ConfigurationError`` naming the field (and the file, when the file set it).
        """
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if environ.get("OPENAI_BASE_URL"):
            values["upstream"] = environ["OPENAI_BASE_URL"]
        path = Path(config_file) if config_file else None
        if path is None and environ.get(CONFIG_ENV):
            path = Path(environ[CONFIG_ENV])
        from_file: dict[str, Any] = {} if path is None else read_config_file(path, environ)
        values.update(from_file)
        above_file: dict[str, Any] = {}
        for name in (*cls.model_fields.keys() - {"compaction", "models"}, *COMPACTION_SETTINGS):
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                above_file[name] = raw
        above_file.update({k: v for k, v in overrides.items() if v is not None})
        values.update(above_file)
        try:
            return cls(**values)
        except ConfigurationError as exc:
            if path is None:
                raise
            raise blame_file(exc, path, set(from_file) - set(above_file)) from None

    def store_spec(self) -> Path | str:
        """What ``open_store`` opens: the Redis URL, else the SQLite path."""
        return self.store if self.store is not None else self.db_path()

    def db_path(self) -> Path | str:
        """Where the checkpoints live (``:memory:`` stays a string)."""
        if self.db is None:
            return default_db_path()
        return ":memory:" if str(self.db) == ":memory:" else self.db


def _string_set(value: Any, what: str, convert: Callable[[str], str]) -> Any:
    """A comma-separated string or a collection of strings (secrets read out) as the frozenset
    of ``convert`` of each non-blank one; any other value is left for the field's validation."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple, set, frozenset)):
        return value
    items = [v.get_secret_value() if isinstance(v, SecretStr) else v for v in value]
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"{what} must be strings")
    return frozenset(convert(item) for item in items if item.strip())
