"""Which stores ``summarizer sessions``, ``show`` and ``export`` read.

The one named by ``--store``, else by ``SUMMARIZER_STORE`` (or ``SUMMARIZER_DB``), else every
store ``summarizer`` writes by default that exists: ``serve``'s (``checkpoints.db`` in the user
state folder) and ``serve --test-upstream``'s (``test-upstream.db`` beside it, kept apart so the
test model's sessions and token calibration never mix with a real upstream's). So the sessions
of whatever the user just ran are found without a flag, and a store that is not there is an
error that says where it looked and how to point elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from .printable import printable

TEST_UPSTREAM_DB = "test-upstream.db"
"""The SQLite file of ``serve --test-upstream``, beside the proxy's default one."""

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        "--db",
        metavar="PATH|URL",
        help="The proxy's store: a SQLite file, or a redis:// URL. (default: $SUMMARIZER_STORE, "
        "else $SUMMARIZER_DB, else each of the proxy's default SQLite file and serve "
        "--test-upstream's that exists)",
    ),
]


def default_test_upstream_db() -> Path:
    """Where ``serve --test-upstream`` keeps its checkpoints unless told: beside the proxy's
    default SQLite file."""
    from ..proxy.settings import default_db_path

    return default_db_path().with_name(TEST_UPSTREAM_DB)


def default_stores() -> list[tuple[Path, str]]:
    """The stores ``summarizer`` writes by default, each with who writes it."""
    from ..proxy.settings import default_db_path

    return [
        (default_db_path(), "summarizer serve's default"),
        (default_test_upstream_db(), "serve --test-upstream's"),
    ]


class NoStore(Exception):
    """No store to read: the message says where it looked and how to name one."""


def store_specs(given: str | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The stores to read: the option, else ``SUMMARIZER_STORE``/``SUMMARIZER_DB``, else the
    default stores that exist. Raises ``NoStore`` when a named SQLite file, or every default
    one, is missing."""
    env = os.environ if environ is None else environ
    named = given or env.get("SUMMARIZER_STORE") or env.get("SUMMARIZER_DB")
    if named:
        if "://" in named or named == ":memory:" or Path(named).expanduser().exists():
            return [named]
        source = "--store" if given else "$SUMMARIZER_STORE / $SUMMARIZER_DB"
        raise NoStore(
            f"no store at {named} (named by {source}; nothing has written it yet). "
            "Pass --store PATH|URL: the store summarizer serve's banner names "
            "(its 'look' line)."
        )
    found = [str(path) for path, _ in default_stores() if path.exists()]
    if found:
        return found
    looked = "\n".join(f"  {path} ({who}): none" for path, who in default_stores())
    raise NoStore(
        "no store found. Looked at:\n"
        "  $SUMMARIZER_STORE, $SUMMARIZER_DB: unset\n"
        f"{looked}\n"
        "Pass --store PATH|URL (a SQLite file or a redis:// URL; or set SUMMARIZER_STORE): "
        "the store summarizer serve's banner names (its 'look' line), or the store= given to "
        "wrap() or ContextManager (their default keeps nothing on disk)."
    )


@dataclass(frozen=True)
class OpenStore:
    """A store being read, and how to name it to the operator (a Redis URL without its
    password)."""

    name: str
    log: Any
    """The store: a ``Store`` that keeps an ``ActivityLog``."""


@contextmanager
def opened(given: str | None) -> Iterator[list[OpenStore]]:
    """The stores to read (``store_specs``), each open and keeping an activity log; exits 1
    saying why when one cannot be read."""
    from ..core.errors import SummarizerError
    from ..stores import ActivityLog, open_store
    from ..stores.redis import display_url

    try:
        specs = store_specs(given)
    except NoStore as exc:
        typer.echo(printable(f"error: {exc}", lines=True), err=True)
        raise typer.Exit(1) from exc
    with ExitStack() as stack:
        stores = []
        for spec in specs:
            name = display_url(spec) if "://" in spec else spec
            try:
                store = open_store(spec)
            except (SummarizerError, OSError) as exc:
                typer.echo(printable(f"error: cannot open the store {name}: {exc}"), err=True)
                raise typer.Exit(1) from exc
            stack.callback(store.close)
            if not isinstance(store, ActivityLog):
                typer.echo(printable(f"error: the store {name} keeps no activity log"), err=True)
                raise typer.Exit(1)
            stores.append(OpenStore(name, store))
        yield stores
