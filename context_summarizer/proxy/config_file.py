"""The ``--config`` file of ``summarizer serve``: TOML, read with the standard library.

Top-level keys are the settings, flat (``upstream``, ``port``, ``trigger_ratio``...: each
setting's ``file_key``, ``proxy.settings_schema``); each ``[[models]]`` table is a
``ModelEntry``: the model name clients send, its upstream and key variable, and the compaction
settings declared per model (``MODEL_COMPACTION_FIELDS``: window, summary model, thresholds...).
Keys are never written in the file: ``api_key_env`` (and ``upstream_api_key_env`` at the top)
name an environment variable, read when the file is.

Every problem (an unreadable file, invalid TOML, an unknown key, a bad value, a literal key, a
missing variable, a duplicate model) raises ``ConfigurationError`` naming the file and the field.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, SecretStr, create_model, field_validator, model_validator

from ..core.config import CompactionConfig, ConfigurationModel
from ..core.errors import ConfigurationError
from ..core.setting import Setting, setting_of
from .prepare_default import OFF, entry_prepare_ratio, is_off
from .settings_schema import DeclaredSetting, marked_fields, without_none

CONFIG_ENV = "SUMMARIZER_CONFIG"
"""The environment variable naming the config file when ``--config`` is not given."""

COMPACTION_SETTINGS = marked_fields(CompactionConfig)
"""The ``CompactionConfig`` fields the proxy takes as flags, ``SUMMARIZER_*`` variables and
keywords of ``Settings`` itself (declared, with their validation, only in ``CompactionConfig``:
those marked ``Setting``)."""

MODEL_COMPACTION_FIELDS = marked_fields(CompactionConfig, per_model=True)
"""The ``CompactionConfig`` fields a ``[[models]]`` entry may set for its model alone."""


def check_upstream_url(value: str) -> str:
    """``value`` without its trailing ``/``; ``ValueError`` unless it is an http(s) URL."""
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"upstream must be an http(s) URL, got {value!r}")
    return value.rstrip("/")


class ModelRouteEntry(ConfigurationModel):
    """One model the proxy serves its own way (a ``[[models]]`` table of the config file): the
    fields of its own. ``ModelEntry`` adds the ``MODEL_COMPACTION_FIELDS``, each optional.

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

    @model_validator(mode="before")
    @classmethod
    def _off_words(cls, data: Any) -> Any:
        """A setting that ``off`` (or 0) turns off holds ``off`` (None would inherit)."""
        if not isinstance(data, Mapping):
            return data
        return {
            name: OFF if name in _OFF_SETTINGS and value is not None and is_off(value) else value
            for name, value in data.items()
        }

    def compaction(self, base: CompactionConfig) -> CompactionConfig:
        """``base`` with this entry's own compaction fields on top (``ConfigurationError`` when
        the combination is invalid, e.g. a target not below the trigger)."""
        own = {name: getattr(self, name) for name in MODEL_COMPACTION_FIELDS}
        prepare = own.pop("prepare_ratio", None)
        overrides = {name: value for name, value in own.items() if value is not None}
        if not overrides and prepare is None:
            return base
        merged = {**dict(base), **overrides}
        merged["prepare_ratio"] = entry_prepare_ratio(prepare, base, merged)
        return CompactionConfig(**merged)


def _per_model_field(name: str) -> tuple[Any, Any]:
    """A ``[[models]]`` entry's field for ``CompactionConfig``'s ``name``: its type and bounds,
    optional (None: the top-level value), and ``off`` where that turns it off."""
    field = CompactionConfig.model_fields[name]
    bounds = [mark for mark in field.metadata if not isinstance(mark, Setting)]
    kind: Any = without_none(field.annotation)
    if bounds:
        kind = Annotated[kind, *bounds]
    mark = setting_of(field)
    if mark is not None and mark.off:
        kind = kind | Literal["off"]
    return kind | None, Field(default=None, description=field.description)


_OFF_SETTINGS = frozenset(
    name
    for name in MODEL_COMPACTION_FIELDS
    if (mark := setting_of(CompactionConfig.model_fields[name])) is not None and mark.off
)

if TYPE_CHECKING:
    ModelEntry = ModelRouteEntry
else:
    ModelEntry = create_model(
        "ModelEntry",
        __base__=ModelRouteEntry,
        __module__=__name__,
        __doc__=ModelRouteEntry.__doc__,
        **{name: _per_model_field(name) for name in MODEL_COMPACTION_FIELDS},
    )


def secret_fields(model: type[ConfigurationModel]) -> tuple[str, ...]:
    """The fields of ``model`` that hold a key: the file names its variable, ``<field>_env``."""
    return tuple(
        name
        for name, field in model.model_fields.items()
        if without_none(field.annotation) is SecretStr
    )


def read_config_file(
    path: str | Path,
    environ: Mapping[str, str],
    *,
    settings: Iterable[DeclaredSetting],
) -> dict[str, Any]:
    """The ``Settings`` values of the TOML file at ``path``, with every ``*_env`` key resolved
    from ``environ`` into the key it names (as ``SecretStr``).

    The top-level keys the file may hold are the ``file_key`` of ``settings`` (the proxy's are
    ``proxy.settings.declared()``), ``models`` among them; a key among them is written
    ``<name>_env``. An entry of ``[[models]]`` holds ``ModelEntry``'s fields.

    Raises ``ConfigurationError`` naming the file (and the field) for an unreadable file,
    invalid TOML, an unknown top-level key, a literal key or a missing variable. Values are
    validated by ``Settings`` itself (``blame_file`` then names the file).
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
    settings = tuple(settings)
    values = _resolved(data, "", path, environ, [s.name for s in settings if s.secret])
    unknown = [key for key in data if key not in {s.file_key for s in settings}]
    if unknown:
        raise _problem(path, unknown[0], "not a known setting")
    models = data.get("models")
    if isinstance(models, list):
        values["models"] = [
            _resolved(entry, f"models[{index}].", path, environ, secret_fields(ModelEntry))
            if isinstance(entry, dict)
            else entry
            for index, entry in enumerate(models)
        ]
    return values


def _resolved(
    table: dict[str, Any],
    prefix: str,
    path: Path,
    environ: Mapping[str, str],
    secrets: Collection[str],
) -> dict[str, Any]:
    """``table`` with each ``<secret>_env`` (``api_key_env``) replaced by the key that variable
    holds (``api_key``); a key written in the file is refused."""
    out = dict(table)
    for name in secrets:
        env_key = f"{name}_env"
        if name in out:
            raise _problem(
                path,
                prefix + name,
                f"a key is never written in the config file; name the environment variable "
                f'that holds it with {env_key} = "VARIABLE"',
            )
        if env_key not in out:
            continue
        variable = out.pop(env_key)
        if not isinstance(variable, str) or not variable:
            raise _problem(path, prefix + env_key, "must be the name of an environment variable")
        secret = environ.get(variable)
        if not secret:
            raise _problem(
                path, prefix + env_key, f"the environment variable {variable} is not set"
            )
        out[name] = SecretStr(secret)
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
