"""The proxy's settings: one model, read from flags, ``SUMMARIZER_*`` environment variables and
the ``--config`` file.

Each setting is declared once, as a field (type, default, bounds, help) marked ``Setting``
(``core.setting``), here or in ``CompactionConfig``; ``declared()`` lists them
(``settings_schema``), and the flags, variables, config-file keys and help all come from it.

Precedence: a command-line flag, then ``SUMMARIZER_<FIELD>``, then the config file
(``config_file``), then the default. The environment is injectable
(``Settings.from_env(environ)``) so tests never touch ``os.environ``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.config import CompactionConfig, ConfigurationModel
from ..core.errors import ConfigurationError
from ..core.setting import Setting
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
from .settings_schema import ENV_PREFIX as ENV_PREFIX  # where it was
from .settings_schema import DeclaredSetting, declared_settings, environment_values

DEFAULT_UPSTREAM = "https://api.openai.com/v1"

SERVER = "Server"
UPSTREAM = "Upstream"
STATE = "State"
ACCESS = "Access"
LOGS = "Logs"
COMPACTION = "Compaction (each also per model, in a [[models]] entry of the config file)"
"""The headings settings are listed under (``Setting.group``)."""


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

    host: Annotated[str, Setting(group=SERVER)] = Field(
        default="127.0.0.1", description="Interface to listen on."
    )
    port: Annotated[int, Setting(group=SERVER)] = Field(
        default=8787, ge=0, le=65535, description="Port to listen on."
    )
    upstream: Annotated[
        str, Setting(group=UPSTREAM, metavar="URL", default_text="$OPENAI_BASE_URL, else {default}")
    ] = Field(
        default=DEFAULT_UPSTREAM,
        description="Base URL of the OpenAI-compatible upstream, ending in /v1 (or the "
        "provider's equivalent).",
    )
    upstream_api_key: Annotated[
        SecretStr | None,
        Setting(group=UPSTREAM, command_line=False, default_text="none: each client's own key"),
    ] = Field(
        default=None,
        description="Sent upstream instead of each client's own key (sessions stay namespaced "
        "by the client's). No flag: command lines are visible to other users of the machine.",
    )
    db: Annotated[
        Path | None, Setting(group=STATE, default_text="checkpoints.db in the user state folder")
    ] = Field(default=None, description="SQLite checkpoint file (:memory: keeps nothing).")
    """None means ``default_db_path()``."""
    store: Annotated[
        str | None, Setting(group=STATE, metavar="URL", default_text="none: SQLite (db)")
    ] = Field(
        default=None,
        description="A Redis URL (redis://HOST:PORT/DB or rediss://...) holding checkpoints, "
        "leases and calibration, shared by several replicas; instead of the SQLite db.",
    )
    lease_ttl: Annotated[float, Setting(group=STATE, metavar="SECONDS")] = Field(
        default=30.0,
        gt=0,
        description="Seconds a session's compaction lease outlives a replica that died holding "
        "it (how long that session then waits before another replica takes over).",
    )
    compaction: Annotated[CompactionConfig, Setting(group=COMPACTION)] = Field(
        default_factory=CompactionConfig
    )
    """How the proxy compacts: the configuration the ``ContextManager`` gets. Its fields marked
    ``Setting`` are settings of the proxy, given flat (``Settings(trigger_ratio=0.7)``)."""
    log_format: Annotated[Literal["text", "json"], Setting(group=LOGS)] = Field(
        default="text", description="Log lines as text or JSON."
    )
    log_level: Annotated[
        Literal["critical", "error", "warning", "info", "debug"], Setting(group=LOGS)
    ] = Field(default="info", description="Log level (any case).")
    max_body_bytes: Annotated[int, Setting(group=SERVER, metavar="BYTES")] = Field(
        default=32 * 1024 * 1024, gt=0, description="Largest request body accepted (413 above)."
    )
    upstream_timeout: Annotated[float, Setting(group=UPSTREAM, metavar="SECONDS")] = Field(
        default=600.0,
        gt=0,
        description="Seconds to wait for the upstream (to connect, and between the bytes of "
        "its answer).",
    )
    keepalive_interval: Annotated[float, Setting(group=SERVER, metavar="SECONDS")] = Field(
        default=5.0,
        gt=0,
        description="Seconds between SSE comment keepalives while a compaction holds a "
        "streamed answer.",
    )
    idle_connection_timeout: Annotated[int, Setting(group=SERVER, metavar="SECONDS")] = Field(
        default=65,
        gt=0,
        description="Seconds an idle client connection stays open: longer than clients' own "
        "idle expiry (httpx, under the openai SDK, drops one after 5 s), so that a client never "
        "sends on a connection the proxy is closing.",
    )
    sessions_api: Annotated[Literal["keyed", "all", "off"], Setting(group=ACCESS)] = Field(
        default="keyed",
        description="Who reads GET /v1/summarizer/sessions/ID and the data of /ui: keyed (only "
        "requests with a key, each its own sessions), all (keyless requests too: they share one "
        "namespace) or off (404).",
    )
    client_keys: Annotated[
        frozenset[str],
        Setting(
            group=ACCESS,
            flag="--client-key",
            metavar="KEY",
            default_text="none: any client may use the proxy",
        ),
    ] = Field(
        default=frozenset(),
        description="A key clients must send: with any set, every request but /healthz and "
        "/metrics needs one of them. sha256:HEX (the key's SHA-256 in hex) keeps the key off "
        "the command line.",
    )
    """Held only as their ``sha256:<hex>`` digests; a value already of that form is taken as a
    digest."""
    allow_origins: Annotated[
        frozenset[str], Setting(group=ACCESS, flag="--allow-origin", metavar="ORIGIN")
    ] = Field(
        default=frozenset(),
        description="A web origin (scheme://host[:port]) whose pages may use the proxy, with "
        "CORS answers. Requests from any other origin's pages (Origin, Sec-Fetch-Site: "
        "cross-site or same-site) and bodies that are not JSON get 403, so no web page can "
        "spend the server's key.",
    )
    """Checked in ``proxy.cross_site``."""
    body_read_timeout: Annotated[float, Setting(group=SERVER, metavar="SECONDS")] = Field(
        default=30.0,
        gt=0,
        description="Seconds to wait for each next piece of a request body, and for a "
        "request's line and headers from its first byte, before answering 408.",
    )
    responses_upstream: Annotated[Literal["responses", "chat"], Setting(group=UPSTREAM)] = Field(
        default="responses",
        description="What serves /v1/responses: responses (the upstream has the Responses API) "
        "or chat (a chat-completions-only upstream such as vLLM, llama.cpp or Ollama: each "
        "request is translated; docs/openai.md says what is lost).",
    )
    fast_path: Annotated[bool, Setting(group=SERVER)] = Field(
        default=True,
        description="Read a chat request that extends its conversation's previous body from its "
        "new bytes only, and stream it upstream as it arrives (the same bytes go upstream "
        "either way).",
    )
    """``proxy.fast_path`` and ``proxy.lane``; off, every body is read whole, then parsed and
    sent."""
    record: Annotated[bool, Setting(group=STATE)] = Field(
        default=False,
        description="Keep each session's latest conversation and each compaction's summary "
        "requests and answers (secrets redacted) for summarizer export and /ui; off, the store "
        "keeps counts and summaries, never the conversation.",
    )
    ui: Annotated[bool, Setting(group=ACCESS)] = Field(
        default=False,
        description="Serve a read-only web page at /ui: sessions, a token chart per session, "
        "each summary next to what it replaced; same key rules as the sessions API.",
    )
    cache_breakpoints: Annotated[Literal["managed", "client"], Setting(group=UPSTREAM)] = Field(
        default="managed",
        description="Anthropic prompt-cache breakpoints on /v1/messages: managed (placed at the "
        "end of the system prompt, the summary and the newest message when a request has none) "
        "or client (left as the client set them). A client's own are always kept.",
    )
    models: Annotated[
        tuple[ModelEntry, ...],
        Setting(group=UPSTREAM, command_line=False, environment=False),
    ] = Field(
        default=(),
        description="Models served their own way, one [[models]] table each (in the config file "
        "only): name, upstream, api_key_env and the settings marked per model. A model none of "
        "them names gets the top-level settings.",
    )

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
        settings = declared()
        from_file = {} if path is None else read_config_file(path, environ, settings=settings)
        values.update(from_file)
        above_file: dict[str, Any] = environment_values(settings, environ)
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


@cache
def declared() -> tuple[DeclaredSetting, ...]:
    """Every setting of the proxy, in the order of its declaration, with its default: what the
    ``serve`` flags, the ``SUMMARIZER_*`` variables and the config-file keys are made from."""
    return declared_settings(Settings, Settings())


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
