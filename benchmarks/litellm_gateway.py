"""LiteLLM's proxy, the most used Python gateway, set up as a plain pass-through for comparison.

LiteLLM runs from its own virtualenv: the release used requires ``openai<3``, which this
project's ``openai>=3.50`` rules out, so it cannot share the project's environment (users run it
as its own service anyway). The virtualenv is made on first use, from the package index pip is
configured with, at ``benchmarks/.litellm-venv``; ``--litellm PATH`` uses an existing ``litellm``
executable instead.

The pinned release is the newest whose ``[proxy]`` extra resolves on the index this project is
benchmarked against: 1.108 to 1.110 pin ``litellm-proxy`` / ``litellm-proxy-extras`` builds that
index does not carry. ``--litellm-spec`` picks another.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .processes import SERVER_IDLE_SECONDS, free_port, running

LITELLM_SPEC = "litellm[proxy]==1.106.12"
"""What ``pip install`` puts in the LiteLLM virtualenv."""

DEFAULT_VENV = Path(__file__).with_name(".litellm-venv")


def ensure_litellm(venv: Path = DEFAULT_VENV, spec: str = LITELLM_SPEC) -> Path:
    """The ``litellm`` executable of ``venv``, installing ``spec`` there first if it is missing.

    Raises ``RuntimeError`` with pip's last lines when the install fails.
    """
    executable = venv / "bin" / "litellm"
    marker = venv / "installed-spec.txt"
    if executable.exists() and marker.exists() and marker.read_text().strip() == spec:
        return executable
    print(f"installing {spec} into {venv} (once)…", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", spec],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0:
        tail = "\n".join((install.stdout + install.stderr).strip().splitlines()[-8:])
        raise RuntimeError(
            f"could not install {spec} into {venv}; pass --litellm PATH to an existing "
            f"litellm executable, or --skip-litellm.\n{tail}"
        )
    marker.write_text(spec + "\n")
    return executable


def litellm_config(upstream: str, model: str) -> str:
    """A LiteLLM proxy config routing ``model`` to the OpenAI-compatible ``upstream``, as is."""
    return (
        "model_list:\n"
        f"  - model_name: {model}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
        f"      api_base: {upstream}\n"
        "      api_key: bench\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )


@contextmanager
def litellm_process(
    executable: Path, upstream: str, model: str
) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """LiteLLM's proxy on a free port in front of ``upstream``; yields its ``/v1`` URL, the
    master key clients authenticate with, and its process.

    ``LITELLM_LOCAL_MODEL_COST_MAP`` keeps it from fetching its price map at start; its log goes
    to a file, at warning level, like ``summarizer serve``'s in this benchmark.
    """
    port = free_port()
    key = "sk-" + secrets.token_hex(32)
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "litellm.yaml"
        config.write_text(litellm_config(upstream, model))
        log = Path(folder) / "litellm.log"
        command = [
            str(executable), "--config", str(config),
            "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1",
            "--keepalive_timeout", str(SERVER_IDLE_SECONDS),
        ]  # fmt: skip
        env = {
            "LITELLM_MASTER_KEY": key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": "WARNING",
            "LITELLM_TELEMETRY": "False",
        }
        base = f"http://127.0.0.1:{port}"
        started = False
        try:
            with running(
                command,
                ready_url=f"{base}/health/liveliness",
                name="litellm",
                env=env,
                timeout=180,
                log=log,
            ) as process:
                started = True
                yield f"{base}/v1", key, process
        except RuntimeError as exc:
            if started:
                raise
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{exc}\n{tail}") from exc
