"""Where each model's requests go: its upstream, the key sent there, and the context manager
that compacts them (its own window, summary model and thresholds).

One ``ModelRoute`` per ``[[models]]`` entry of the config file, plus the top-level one for every
other model and for pass-through requests without a model. A request looks its route up once,
from the model it names, and every upstream call made for it (the agent's request, its summary
calls, its token counts) uses that route alone: one model's key never goes to another model's
upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import SecretStr

from ..core.config import CompactionConfig
from ..library.manager import ContextManager
from .settings import Settings


@dataclass(frozen=True)
class ModelRoute:
    """An upstream, the key the proxy sends it (None: the client's own credential), and the
    ``ContextManager`` whose configuration the route's requests are compacted with."""

    name: str | None
    """The ``[[models]]`` entry's name; None for the top-level route."""
    upstream: str
    api_key: SecretStr | None
    context: ContextManager

    @property
    def host(self) -> str:
        """``scheme://host[:port]`` of the upstream: enough to name it in a message, never its
        userinfo or query."""
        return display_host(self.upstream)

    def url(self, path: str, query: str = "") -> str:
        """The upstream URL for the part of a request path after ``/v1``."""
        return self.upstream + path + (f"?{query}" if query else "")


class RouteTable:
    """The routes of one proxy, and the lookup of a model name's route.

    An entry's name matches the model exactly; a name ending in ``*`` matches any model with
    that prefix (the longest such prefix wins). An exact name beats every prefix; a model no
    entry matches (or no model at all) gets the top-level route.
    """

    def __init__(
        self, settings: Settings, manager_for: Callable[[CompactionConfig], ContextManager]
    ) -> None:
        """``manager_for`` builds the context manager of a configuration (called once per
        distinct configuration: routes with the same one share it)."""
        managers: list[tuple[CompactionConfig, ContextManager]] = []

        def shared(config: CompactionConfig) -> ContextManager:
            for known, manager in managers:
                if known == config:
                    return manager
            manager = manager_for(config)
            managers.append((config, manager))
            return manager

        self.default = ModelRoute(
            None, settings.upstream, settings.upstream_api_key, shared(settings.compaction)
        )
        self._exact: dict[str, ModelRoute] = {}
        self._prefixes: list[tuple[str, ModelRoute]] = []
        for entry in settings.models:
            if entry.upstream is None:  # the top-level upstream, with the top-level key
                upstream, key = settings.upstream, entry.api_key or settings.upstream_api_key
            else:  # its own upstream: only its own key ever goes there
                upstream, key = entry.upstream, entry.api_key
            route = ModelRoute(
                entry.name, upstream, key, shared(entry.compaction(settings.compaction))
            )
            if entry.name.endswith("*"):
                self._prefixes.append((entry.name[:-1], route))
            else:
                self._exact[entry.name] = route
        self._prefixes.sort(key=lambda item: len(item[0]), reverse=True)
        self.managers = tuple(manager for _, manager in managers)
        """Every distinct context manager, the top-level one first."""
        routes = [self.default, *self._exact.values(), *(r for _, r in self._prefixes)]
        self.keys = tuple(
            dict.fromkeys(r.api_key.get_secret_value() for r in routes if r.api_key is not None)
        )
        """Every upstream key the routes hold, raw: kept out of what the proxy stores."""

    def route_for(self, model: object) -> ModelRoute:
        """The route of requests naming ``model`` (anything but a string: the top-level one)."""
        if not isinstance(model, str):
            return self.default
        exact = self._exact.get(model)
        if exact is not None:
            return exact
        for prefix, route in self._prefixes:
            if model.startswith(prefix):
                return route
        return self.default


def display_host(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: enough to name it, never its userinfo or query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
