"""The ``--config`` file of ``summarizer serve``: TOML, read with the standard library.

Top-level keys are ``Settings`` fields, flat (``upstream``, ``port``, ``trigger_ratio``...);
each ``[[models]]`` table is a ``ModelEntry``: the model name clients send, and the upstream,
key variable, window, summary model and thresholds its requests get. Keys are never written in
the file: ``api_key_env`` (and ``upstream_api_key_env`` at the top) name an environment
variable, read when the file is.

Every problem (an unreadable file, invalid TOML, an unknown key, a bad value, a literal key, a
missing variable, a duplicate model) raises ``ConfigurationError`` naming the file and the field.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator

from ..core.config import CompactionConfig, ConfigurationModel, SummaryCapField
from ..core.errors import ConfigurationError
from ..core.results import Policy
from .prepare_default import OFF, entry_prepare_ratio, is_off

CONFIG_ENV = "SUMMARIZER_CONFIG"
"""The environment variable naming the config file when ``--config`` is not given."""

COMPACTION_SETTINGS = (
    "context_window",
    "trigger_ratio",
    "target_ratio",
    "prepare_ratio",
    "keep_recent_tokens",
    "max_summary_tokens",
    "summary_cap_field",
    "summary_model",
    "policy",
)
"""The ``CompactionConfig`` fields the proxy takes as flags, ``SUMMARIZER_*`` variables and
keywords of ``Settings`` itself (declared, with their validation, only in ``CompactionConfig``)."""

MODEL_COMPACTION_FIELDS = ("reserve_output_tokens", *COMPACTION_SETTINGS)
"""The ``CompactionConfig`` fields a ``[[models]]`` entry may set for its model alone."""

_LITERAL_KEYS = {
    "api_key": "api_key_env",
    "upstream_api_key": "upstream_api_key_env",
}
"""Keys that would hold a secret in the file, and what to write instead."""


def check_upstream_url(value: str) -> str:
    """``value`` without its trailing ``/``; ``ValueError`` unless it is an http(s) URL."""
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"upstream must be an http(s) URL, got {value!r}")
    return value.rstrip("/")


class ModelEntry(ConfigurationModel):
    """One model the proxy serves its own way (a ``[[models]]`` table of the config file).

    Unset fields inherit: an entry without ``upstream`` goes to the top-level upstream with the
    top-level key; an entry with its own ``upstream`` sends only its own ``api_key`` there
    (none: the client's credential is forwarded, as without a server-side key). Unset
    compaction fields take the top-level value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    _described_as = "model entry"

    name: str = Field(min_length=1)
    """The model name clients send, matched exactly; a trailing ``*`` matches any name with
    that prefix (the longest prefix wins; an exact name beats every prefix)."""
    upstream: str | None = None
    """Base URL of this model's upstream (``.../v1``); None: the top-level upstream."""
    api_key: SecretStr | None = None
    """Sent to this model's upstream instead of the client's credential (read from the variable
    ``api_key_env`` names: the file never holds a key)."""
    context_window: int | None = Field(default=None, gt=0)
    reserve_output_tokens: int | None = Field(default=None, ge=0)
    trigger_ratio: float | None = Field(default=None, gt=0, le=1)
    target_ratio: float | None = Field(default=None, gt=0, le=1)
    prepare_ratio: Annotated[float, Field(gt=0, lt=1)] | Literal["off"] | None = None
    """This model's own prepare ratio; ``off`` (or 0): no drafts ahead of time for it."""
    keep_recent_tokens: int | None = Field(default=None, ge=0)
    max_summary_tokens: int | None = Field(default=None, gt=0)
    summary_cap_field: SummaryCapField | None = None
    summary_model: str | None = None
    policy: Policy | None = None

    @field_validator("name")
    @classmethod
    def _one_trailing_star(cls, value: str) -> str:
        if "*" in value[:-1]:
            raise ValueError(f"a model name may end in '*', and have no other '*' ({value!r})")
        return value

    @field_validator("upstream")
    @classmethod
    def _upstream_url(cls, value: str | None) -> str | None:
        return None if value is None else check_upstream_url(value)

    @field_validator("prepare_ratio", mode="before")
    @classmethod
    def _prepare_off(cls, value: Any) -> Any:
        return OFF if value is not None and is_off(value) else value

    def compaction(self, base: CompactionConfig) -> CompactionConfig:
        """``base`` with this entry's own compaction fields on top (``ConfigurationError`` when
        the combination is invalid, e.g. a target not below the trigger)."""
        overrides = {
            name: getattr(self, name)
            for name in MODEL_COMPACTION_FIELDS
            if getattr(self, name) is not None and name != "prepare_ratio"
        }
        if not overrides and self.prepare_ratio is None:
            return base
        merged = {**dict(base), **overrides}
        merged["prepare_ratio"] = entry_prepare_ratio(self.prepare_ratio, base, merged)
        return CompactionConfig(**merged)


def read_config_file(path: str | Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``Settings`` values of the TOML file at ``path``, with every ``*_env`` key resolved
    from ``environ`` into the key it names (as ``SecretStr``).

    Raises ``ConfigurationError`` naming the file (and the field) for an unreadable file,
    invalid TOML, a literal key or a missing variable. Values are validated by ``Settings``
    itself (``blame_file`` then names the file).
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the config file {path}: {exc.strerror or type(exc).__name__}"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None
    values = _resolved(data, "", path, environ, top=True)
    models = data.get("models")
    if isinstance(models, list):
        values["models"] = [
            _resolved(entry, f"models[{index}].", path, environ)
            if isinstance(entry, dict)
            else entry
            for index, entry in enumerate(models)
        ]
    return values


def _resolved(
    table: dict[str, Any], prefix: str, path: Path, environ: Mapping[str, str], *, top: bool = False
) -> dict[str, Any]:
    """``table`` with its ``api_key_env`` (or, at the top, ``upstream_api_key_env``) replaced by
    the key that variable holds; a literal key is refused."""
    out = dict(table)
    for literal, instead in _LITERAL_KEYS.items():
        if literal in out:
            raise _problem(
                path,
                prefix + literal,
                f"a key is never written in the config file; name the environment variable "
                f'that holds it with {instead} = "VARIABLE"',
            )
    env_key = "upstream_api_key_env" if top else "api_key_env"
    if env_key not in out:
        return out
    variable = out.pop(env_key)
    if not isinstance(variable, str) or not variable:
        raise _problem(path, prefix + env_key, "must be the name of an environment variable")
    secret = environ.get(variable)
    if not secret:
        raise _problem(path, prefix + env_key, f"the environment variable {variable} is not set")
    out[env_key.removesuffix("_env")] = SecretStr(secret)
    return out


def _problem(path: Path, field: str, problem: str) -> ConfigurationError:
    return ConfigurationError(
        f"invalid config file {path}: {field}: {problem}", problems=((field, problem),)
    )


def blame_file(exc: ConfigurationError, path: Path, from_file: set[str]) -> ConfigurationError:
    """``exc`` (from validating the settings) saying which of its fields were set in the file at
    ``path``; ``from_file`` holds the top-level names the file set."""
    if not exc.problems:
        return exc
    listed = []
    for field, problem in exc.problems:
        root = field.split(".", 1)[0].split("[", 1)[0]
        where = f" (set in {path})" if root in from_file else ""
        listed.append(f"{field}: {problem}{where}" if field else problem)
    return ConfigurationError(f"invalid settings: {'; '.join(listed)}", problems=exc.problems)
