"""``load_session_view``: one session of one namespace, as a store holds it (its checkpoints,
request records and latest recording), for ``summarizer show`` and ``/ui``."""

from __future__ import annotations

from ..core.session_view import SessionView, session_view
from .base import ActivityLog, Store


def load_session_view(store: Store, namespace: str, session: str) -> SessionView | None:
    """The view of ``session`` in ``namespace``; None when the store has neither a checkpoint
    nor a request record of it there. A store without an activity log gives its checkpoints
    alone."""
    checkpoints = store.list_session(namespace, session)
    log = store if isinstance(store, ActivityLog) else None
    requests = log.session_requests(namespace, session) if log is not None else []
    if not checkpoints and not requests:
        return None
    recordings = log.recordings(namespace, session) if log is not None else []
    return session_view(
        namespace, session, checkpoints, requests, recordings[-1] if recordings else None
    )
