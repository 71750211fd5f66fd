"""An earlier commit's source tree, to measure it beside this one in the same run.

Figures from another run carry that run's host load (on this machine a request's direct time
moves by half between runs an hour apart); a commit measured in the same run, interleaved with
this one, does not. ``checkout`` extracts the commit with ``git archive`` (no worktree is left
behind); the tree runs in this environment, so it must import with the installed packages.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


class CheckoutUnavailable(RuntimeError):
    """The commit cannot be extracted (no git, not a repository, an unknown commit)."""


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """``revision``'s tree in a temporary folder, for the block.

    Raises ``CheckoutUnavailable`` when git cannot produce it."""
    with tempfile.TemporaryDirectory(prefix="summarizer-before-") as folder:
        archive = Path(folder) / "tree.tar"
        try:
            subprocess.run(
                ["git", "-C", str(REPOSITORY), "archive", "--output", str(archive), revision],
                check=True,
                capture_output=True,
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            raise CheckoutUnavailable(
                f"cannot extract {revision} from {REPOSITORY}: {detail.decode(errors='replace')}"
                f"{exc if not detail else ''}".strip()
            ) from exc
        tree = Path(folder) / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        yield tree
