"""A Triton Inference Server for the notebooks: embedded, or one that already runs.

The embedded server is the real ``tritonserver`` binary (Triton 2.51) that ships inside
the ``nvidia-pytriton`` wheel. It has the python backend but no libtorch or onnxruntime
backend, so this module installs the book's python-based stand-ins for those two (see
``tritonbook.standins``) next to the python backend.

Set ``TRITON_URL`` (HTTP, ``host:port``) and optionally ``TRITON_GRPC_URL`` to use a
server that already runs instead, such as the NGC container from ``docker/``.

    with tritonbook.server.start() as server:
        server.load("affine_python")
        client = server.http()
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import glob
import importlib.metadata
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tritonbook import device
from tritonbook.repository import REPOSITORY, read_config

PACKAGE_ROOT = Path(__file__).resolve().parent
DEFAULT_REPOSITORY = REPOSITORY
# Backend name -> the stand-in (a folder of tritonbook/standins) that serves it here.
STANDINS = {"pytorch": "pytorch", "onnxruntime": "onnxruntime", "torch_aoti_standin": "torch_aoti"}
# Triton 2.51's core does not know `platform: "torch_aoti"` (pytorch_backend serves it since
# Triton 26.03): it refuses such a config when it polls the repository, before any backend
# sees it. It does accept any platform with a backend name it does not know, so on the
# embedded server the book loads those models with a config that adds this backend.
AOTI_PLATFORM = "torch_aoti"
AOTI_STANDIN = "torch_aoti_standin"
# The embedded server reports this id as its name in the server metadata, so a client
# can tell it (and its stand-ins) apart from the NGC container, which reports "triton".
EMBEDDED_ID = "tritonbook-embedded"
# Every python-based backend of an embedded server (python and the stand-ins) names its
# /dev/shm regions "<prefix><uuid>", the prefix set by the backend option
# shm-region-prefix-name. The book's prefix holds the pid of the process that started
# the server and a random token: stop() removes exactly its own server's regions (those
# of killed stubs and of a killed server too), and a new server removes those of a
# process that is gone, never those of another live server whose process it can see.
SHM_PREFIX = "tritonbook-server-"
# The line tritonserver logs when a start fails (a model that failed to load under
# --exit-on-error, a port in use...); it then exits with code 1.
START_FAILED = "error: creating server:"
EXIT_GRACE_S = 10.0
# What Triton 2.51's gRPC event engine logs before it aborts the server at start-up.
GRPC_POLLER_ABORT = "encountered epoll_wait error"
_SHM_OWNER = re.compile(rf"^{re.escape(SHM_PREFIX)}(\d+)-[0-9a-f]+-")


class TritonServerError(RuntimeError):
    """The server did not start, or a model did not load. Carries the server log's tail.

    ``reason`` is the server's own answer alone, without the log.
    """

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = message if reason is None else reason


@dataclass
class ServerInfo:
    """What a server is, as far as a client can tell."""

    url: str
    version: str
    embedded: bool
    backends: list[str] | None  # None: not visible from outside the server
    standins: list[str] | None

    def rows(self) -> list[tuple[str, str]]:
        standins = "unknown" if self.standins is None else (", ".join(self.standins) or "none")
        backends = "not visible to a client" if self.backends is None else ", ".join(self.backends)
        return [
            ("server", "embedded (nvidia-pytriton wheel)" if self.embedded else "remote"),
            ("Triton version", self.version),
            ("backends", backends),
            ("stand-in backends", standins),
        ]


class Triton:
    """A running Triton server reached over HTTP and gRPC (base of both kinds)."""

    embedded = False

    def __init__(self, http_url: str, grpc_url: str, metrics_url: str | None = None):
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.metrics_url = metrics_url
        self._http = threading.local()
        self._http_clients = []
        self._grpc = None

    # Clients -----------------------------------------------------------------------
    def http(self):
        """A ``tritonclient.http`` client, one per thread (the HTTP client is not
        thread-safe: threads sharing one block each other forever)."""
        client = getattr(self._http, "client", None)
        if client is None:
            import tritonclient.http as httpclient

            client = self._http.client = httpclient.InferenceServerClient(self.http_url)
            self._http_clients.append(client)
        return client

    def grpc(self):
        """A ``tritonclient.grpc`` client, made once and shared (it is thread-safe)."""
        if self._grpc is None:
            import tritonclient.grpc as grpcclient

            self._grpc = grpcclient.InferenceServerClient(self.grpc_url)
        return self._grpc

    def _close_clients(self) -> None:
        for client in [*self._http_clients, self._grpc]:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        self._http, self._http_clients, self._grpc = threading.local(), [], None

    # Health and models -------------------------------------------------------------
    def is_live(self) -> bool:
        return _http_status(f"http://{self.http_url}/v2/health/live") == 200

    def is_ready(self) -> bool:
        return _http_status(f"http://{self.http_url}/v2/health/ready") == 200

    def load(self, model: str, config: dict | str | None = None, files: dict[str, bytes] | None = None,
             headers: dict[str, str] | None = None) -> None:
        """Load (or reload) a model. ``config`` overrides its config.pbtxt (JSON form);
        ``files`` ({"file:1/model.pt": bytes, ...}) upload the model's files with it;
        ``headers`` go with the request (the key of a restricted API, chapter 7).

        On a GPU run (``tritonbook.device``) a model loaded with no ``config`` is loaded
        with its config.pbtxt placed on the GPU (``device.place``); on the CPU nothing
        changes.

        On the embedded server a ``platform: "torch_aoti"`` model is loaded with a config
        that adds ``backend: "torch_aoti_standin"`` (see AOTI_STANDIN); the stand-in says so
        in the server log. Raises TritonServerError with the server's reason on failure.
        """
        from tritonclient.utils import InferenceServerException

        if config is None and device.selected() == "cuda":
            path = self._local_repository() / model / "config.pbtxt"
            if path.exists():
                config = device.place(read_config(model, self._local_repository()))
        config = self._route_to_standin(model, config)
        if isinstance(config, dict):
            config = json.dumps(config)
        try:
            self.http().load_model(model, config=config, files=files, headers=headers)
        except InferenceServerException as exc:
            reason = f"loading model '{model}' failed: {exc.message()}"
            raise TritonServerError(self._explain(reason), reason) from None

    def unload(self, model: str, wait: float = 30.0, headers: dict[str, str] | None = None,
               finished: bool = False) -> None:
        """Unload a model and wait until it takes no more requests (no longer READY).

        The unload itself goes on after that: a python model's stubs take about a second
        to end (chapter 12). ``finished=True`` waits until the repository index says
        UNAVAILABLE, its stubs gone, as a loop that unloads and loads again should.
        """
        self.http().unload_model(model, headers=headers)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            index = self.http().get_model_repository_index(headers=headers)
            state = {m["name"]: m.get("state") for m in index}.get(model)
            if state != "READY" and not (finished and state == "UNLOADING"):
                return
            time.sleep(0.01 if finished else 0.1)
        raise TritonServerError(f"model '{model}' still {state} {wait:.0f} s after unload")

    def model_ready(self, model: str) -> bool:
        return self.http().is_model_ready(model)

    def is_embedded(self) -> bool:
        """Whether this is the book's embedded server (it names itself EMBEDDED_ID)."""
        if getattr(self, "_embedded", None) is None:
            self._embedded = self.http().get_server_metadata().get("name") == EMBEDDED_ID
        return self._embedded

    def served_by(self, model: str) -> str:
        """What runs a loaded model, in words: a stand-in or the server's own backend."""
        config = self.http().get_model_config(model)
        backend = config.get("backend") or config.get("platform", "?")
        if self.is_embedded() and backend in STANDINS:
            return f"the book's python stand-in for the '{backend}' backend ({config.get('platform')})"
        where = "the embedded server's" if self.is_embedded() else "the server's"
        return f"{where} '{backend}' backend"

    def _route_to_standin(self, model: str, config: dict | str | None) -> dict | str | None:
        """On the embedded server, a torch_aoti config with the stand-in's backend added."""
        if isinstance(config, str) or not self.is_embedded():
            return config
        if config is None:
            path = self._local_repository() / model / "config.pbtxt"
            if not path.exists():
                return None
            config = read_config(model, self._local_repository())
            if config.get("platform") != AOTI_PLATFORM:
                return None
        if config.get("platform") == AOTI_PLATFORM and not config.get("backend"):
            config = dict(config, backend=AOTI_STANDIN)
        return config

    def _local_repository(self) -> Path:
        # A server found through TRITON_URL serves the book's repository (make serve,
        # make test-remote, the container's bind mount).
        return DEFAULT_REPOSITORY

    def info(self) -> ServerInfo:
        meta = self.http().get_server_metadata()
        embedded = meta.get("name") == EMBEDDED_ID
        return ServerInfo(
            url=self.http_url,
            version=meta["version"],
            embedded=embedded,
            backends=None,
            standins=list(STANDINS) if embedded else None,
        )

    def _explain(self, message: str) -> str:
        return message

    # Context manager ----------------------------------------------------------------
    def stop(self) -> None:
        self._close_clients()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class RemoteTriton(Triton):
    """A server that someone else started (the container): never stopped by us."""

    def __repr__(self) -> str:
        return f"RemoteTriton(http={self.http_url}, grpc={self.grpc_url})"


class EmbeddedTriton(Triton):
    """The wheel's ``tritonserver`` started by this process, on 127.0.0.1 only.

    It starts with config auto-complete off (``--disable-auto-complete-config``; why: the
    comment at the flag). ``auto_complete=True`` gives Triton's default, the container's:
    a backend may then fill in what a config leaves out (onnxruntime's inputs, outputs
    and batching, chapter 4). The constructor returns when the server is ready, or with
    ``wait_for="live"`` when it answers at all (chapter 5: a server that keeps running
    with a model that failed to load is live and not ready). ``dev_shm_bytes`` gives the
    server and its python stubs a ``/dev/shm`` of that size of their own, as ``docker run
    --shm-size`` does (chapter 7; Docker's default is 64 MB). ``environment`` adds
    variables to the server's environment, which its stubs inherit; ``LD_PRELOAD``,
    ``LD_LIBRARY_PATH`` and ``PATH`` go in front of what the server already has
    (chapter 5 preloads an op library this way)."""

    embedded = True

    def __init__(
        self,
        model_repository: str | os.PathLike = DEFAULT_REPOSITORY,
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        load_models: list[str] | tuple[str, ...] = (),
        model_control: str = "explicit",
        startup_timeout: float = 120.0,
        extra_args: list[str] | tuple[str, ...] = (),
        log_verbose: int = 0,
        auto_complete: bool = False,
        wait_for: str = "ready",
        dev_shm_bytes: int | None = None,
        environment: dict[str, str] | None = None,
    ):
        if wait_for not in ("ready", "live"):
            raise ValueError(f"wait_for must be 'ready' or 'live', not {wait_for!r}")
        if dev_shm_bytes is not None and dev_shm_bytes < 1 << 20:
            raise ValueError(f"dev_shm_bytes must be at least 1 MiB, not {dev_shm_bytes}")
        self.model_repository = Path(model_repository).resolve()
        if not self.model_repository.is_dir():
            raise TritonServerError(f"model repository {self.model_repository} is not a folder")
        self.workdir = Path(tempfile.mkdtemp(prefix="tritonbook-"))
        self.log_path = self.workdir / "server.log"
        try:
            self.backends_dir = _prepare_backends(self.workdir / "backends")
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        remove_orphaned_shm_regions()
        self.shm_prefix = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}-"
        ports = _free_ports(3) if None in (http_port, grpc_port, metrics_port) else []
        self.http_port = http_port or ports[0]
        self.grpc_port = grpc_port or ports[1]
        self.metrics_port = metrics_port or ports[2]
        super().__init__(
            f"127.0.0.1:{self.http_port}",
            f"127.0.0.1:{self.grpc_port}",
            f"127.0.0.1:{self.metrics_port}",
        )
        wheel = _wheel_paths()
        args = [
            str(wheel.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={self.backends_dir}",
            f"--cache-directory={wheel.caches}",
            f"--id={EMBEDDED_ID}",
            f"--model-control-mode={model_control}",
            # Triton listens on 0.0.0.0 unless told otherwise.
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--exit-timeout-secs=10",
            f"--log-verbose={log_verbose}",
            # Every config in model_repository/ is complete, so nothing is left for
            # a backend to fill in. With auto-complete on (Triton's default, and the
            # container's), each python-backend load starts a stub only to ask the
            # model for its config, then checks that stub's health, which waits a
            # second (python_backend src/stub_launcher.cc, UpdateHealth): the
            # stand-ins of libtorch and onnxruntime would pay it on every load, the
            # container's native backends do not.
            *(() if auto_complete else ("--disable-auto-complete-config",)),
            *(f"--backend-config={backend},shm-region-prefix-name={self.shm_prefix}"
              for backend in ("python", *STANDINS)),
            *(f"--load-model={m}" for m in load_models),
            *extra_args,
        ]
        if dev_shm_bytes is not None:
            args = _with_own_dev_shm(args, dev_shm_bytes)
        self.command = args
        self._log_file = open(self.log_path, "wb")
        atexit.register(self.stop)
        for attempt in (1, 2):
            with _fork_notice_silenced():
                self.process = subprocess.Popen(
                    args,
                    stdout=self._log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=_server_environment(wheel, environment),
                    cwd=self.workdir,
                    # Own process group: stop() can reach the python backend stubs.
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            try:
                self._wait_ready(startup_timeout, wait_for)
                return
            except TritonServerError:
                if attempt == 1 and self._grpc_poller_abort():
                    # Seen once in a clean-clone CI run (2026-11-28): Triton 2.51's
                    # gRPC event engine aborted at start-up. Once, not twice: a
                    # second abort is reported like any other failure.
                    _kill_group(self.process.pid)
                    self.process.wait(timeout=5)
                    continue
                self.stop()
                raise
            except BaseException:
                self.stop()
                raise

    def _grpc_poller_abort(self) -> bool:
        """Did the server die of SIGABRT with gRPC's "epoll_wait error" in its log?"""
        return (self.process.returncode == -signal.SIGABRT
                and GRPC_POLLER_ABORT in self.log())

    def __repr__(self) -> str:
        state = "running" if self.process.poll() is None else f"exited {self.process.returncode}"
        return f"EmbeddedTriton(http={self.http_url}, grpc={self.grpc_url}, {state})"

    @property
    def stub(self) -> Path:
        """The python backend stub this server runs (the wheel's, for this Python)."""
        return self.backends_dir / "python" / "triton_python_backend_stub"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        """The whole server log so far (also after stop())."""
        with contextlib.suppress(FileNotFoundError):
            return self.log_path.read_text(errors="replace")
        return getattr(self, "_final_log", "")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def _explain(self, message: str) -> str:
        return f"{message}\n--- server log (last lines) ---\n{self.log_tail()}"

    def _wait_ready(self, timeout: float, wait_for: str = "ready") -> None:
        # "live": the endpoints answer. Triton opens them only after the start-up loads
        # are done, so a server that keeps a failed model (--exit-on-error=false) is
        # live but, under --strict-readiness (the default), never ready.
        answers = self.is_ready if wait_for == "ready" else self.is_live
        deadline = time.monotonic() + timeout
        given_up_at = None  # when the log said the server would not start
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TritonServerError(
                    self._explain(f"tritonserver exited with code {self.process.returncode} while starting")
                )
            if answers():
                return
            if given_up_at is None and START_FAILED in self.log():
                given_up_at = time.monotonic()
            elif given_up_at is not None and time.monotonic() - given_up_at > EXIT_GRACE_S:
                # It said it failed and then did not exit (seen once in CI; a python
                # model's finalize that does not return does it): nothing will come of
                # waiting longer, and the caller's except stops it.
                raise TritonServerError(self._explain(
                    f"tritonserver failed to start and had not exited {EXIT_GRACE_S:.0f} s "
                    "later; stopped it"))
            time.sleep(0.2)
        raise TritonServerError(self._explain(f"tritonserver was not {wait_for} after {timeout:.0f} s"))

    def is_embedded(self) -> bool:
        return True

    def _local_repository(self) -> Path:
        return self.model_repository

    def info(self) -> ServerInfo:
        info = super().info()
        info.backends = sorted(p.name for p in self.backends_dir.iterdir() if p.is_dir())
        return info

    def stop(self) -> None:
        """Stop the server and every process it started; safe to call twice."""
        self._close_clients()
        process = getattr(self, "process", None)
        if process is not None:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left in the group (a stub that outlived the server) is killed.
            _kill_group(process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            self._log_file.close()
        # With every process of the server gone, nothing maps its regions any more.
        if getattr(self, "shm_prefix", None):
            remove_shm_regions(self.shm_prefix)
        atexit.unregister(self.stop)
        if self.workdir.exists():
            # The work folder goes; the log stays readable through log() afterwards.
            self._final_log = self.log()
            shutil.rmtree(self.workdir, ignore_errors=True)


# Entry points ------------------------------------------------------------------------
def start(model_repository: str | os.PathLike = DEFAULT_REPOSITORY, **kwargs) -> Triton:
    """The server the notebooks use.

    With ``TRITON_URL`` set: the server found there (it must be live; nothing is
    started and nothing will be stopped). Otherwise: a new embedded server on
    ``model_repository`` with free ports on 127.0.0.1. Use it as a context manager, or
    call ``stop()``; it is also stopped at exit and when this process dies.
    """
    remote = remote_from_environment()
    if remote is not None:
        return remote
    return EmbeddedTriton(model_repository, **kwargs)


def stop_all(*servers: Triton) -> None:
    """Stop several servers side by side. Each one waits for its models to unload, and
    Triton checks on them once a second, so one after the other costs the sum of those
    waits and side by side the longest of them. A failure to stop is raised."""
    failures: list[BaseException] = []

    def stop(one: Triton) -> None:
        try:
            one.stop()
        except BaseException as exc:  # raised below, in the caller's thread
            failures.append(exc)

    stoppers = [threading.Thread(target=stop, args=(s,)) for s in servers]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()
    if failures:
        raise failures[0]


def remote_from_environment(environ: dict | None = None) -> RemoteTriton | None:
    """The server named by ``TRITON_URL`` / ``TRITON_GRPC_URL`` / ``TRITON_METRICS_URL``, or None."""
    environ = os.environ if environ is None else environ
    http_url = environ.get("TRITON_URL", "").strip()
    if not http_url:
        return None
    http_url = _strip_scheme(http_url)
    host = http_url.rsplit(":", 1)[0]
    # The container publishes gRPC on 8001 and metrics on 8002 next to HTTP on 8000.
    grpc_url = _strip_scheme(environ.get("TRITON_GRPC_URL", "").strip()) or f"{host}:8001"
    metrics_url = _strip_scheme(environ.get("TRITON_METRICS_URL", "").strip()) or f"{host}:8002"
    server = RemoteTriton(http_url, grpc_url, metrics_url)
    if not server.is_live():
        raise TritonServerError(
            f"TRITON_URL={http_url} is set but no live Triton server answers at "
            f"http://{http_url}/v2/health/live; start the container (docker compose up) "
            "or unset TRITON_URL to use the embedded server"
        )
    return server


# Helpers -----------------------------------------------------------------------------
@dataclass
class _Wheel:
    root: Path  # pytriton/tritonserver
    libs: Path  # nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def caches(self) -> Path:
        return self.root / "caches"

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"


def _wheel_paths() -> _Wheel:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonServerError(
            "the nvidia-pytriton wheel is not installed; run `make venv` "
            "(or pip install -r requirements.txt), or set TRITON_URL to use a running server"
        )
    package = Path(list(spec.submodule_search_locations)[0])
    wheel = _Wheel(root=package / "tritonserver", libs=package.parent / "nvidia_pytriton.libs")
    for path in (wheel.binary, wheel.python_backend, wheel.libs):
        if not path.exists():
            raise TritonServerError(f"the nvidia-pytriton wheel has no {path}; reinstall it")
    if not wheel.stub.exists():
        raise TritonServerError(
            f"the nvidia-pytriton wheel has no python backend stub for Python "
            f"{sys.version_info.major}.{sys.version_info.minor} ({wheel.stub})"
        )
    return wheel


def python_stubs() -> dict[str, Path]:
    """The python backend stubs in the nvidia-pytriton wheel: Python version -> stub.

    A stub embeds one CPython minor version; the embedded server copies the one for the
    Python running this process (``EmbeddedTriton.stub``).
    """
    folder = _wheel_paths().root / "python_backend_stubs"
    found = {p.parent.name: p for p in folder.glob("*/triton_python_backend_stub")}
    return dict(sorted(found.items(), key=lambda item: tuple(map(int, item[0].split(".")))))


def stub_libpython(stub: str | os.PathLike) -> str:
    """The libpython a stub links against, from ``ldd`` (with the server's library path)."""
    found = _ldd(stub, _wheel_paths())
    if found is None:
        raise TritonServerError("ldd is not installed: cannot read the stub's libraries")
    lines = [line.strip() for line in found if "libpython" in line]
    if len(lines) != 1:
        raise TritonServerError(f"{stub}: expected one libpython in ldd's answer, got {lines}")
    return lines[0]


def _prepare_backends(target: Path) -> Path:
    """A backend folder: the wheel's python backend, its stub for this Python, the stand-ins."""
    wheel = _wheel_paths()
    shutil.copytree(wheel.python_backend, target / "python", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(wheel.stub, target / "python" / wheel.stub.name)
    _check_stub_libraries(target / "python" / wheel.stub.name, wheel)
    for backend, folder in STANDINS.items():
        (target / backend).mkdir(parents=True)
        # A folder with model.py and no libtriton_<name>.so: Triton runs it on the
        # python backend for every model whose backend (or platform) is <name>, and
        # records `runtime: "model.py"` in the served config.
        shutil.copy2(PACKAGE_ROOT / "standins" / folder / "model.py", target / backend / "model.py")
    return target


# Search paths: a value given for one of these goes in front of what is there.
_PATH_LISTS = ("LD_PRELOAD", "LD_LIBRARY_PATH", "PATH")


def _server_environment(wheel: _Wheel, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The wheel's own shared libraries, then this interpreter's libpython: the stub
    # embeds libpython3.X, and the running Python's copy matches its site-packages.
    libdirs = [str(wheel.libs), sysconfig.get_config_var("LIBDIR") or ""]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [*libdirs, env.get("LD_LIBRARY_PATH", "")] if p)
    # The stub's embedded Python finds its prefix by looking up "python3" on PATH (and on
    # Python 3.11+ this 24.10 stub ignores PYTHONPATH, book/versions.md): this
    # environment's bin folder first makes python models run
    # with this venv's site-packages (torch, cv2, the editable tritonbook), .pth included.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    # On a lent GPU machine with numpy 2, the 24.10 stub (its pybind11 predates numpy 2)
    # answers python models with empty tensors (book/gpu.md): the server's processes get
    # the numpy 1.26 that the GPU run's setup unpacked and names in this variable (a .pth
    # file there reads it); the notebook's own process keeps the machine's numpy.
    fallback = os.environ.get("TRITONBOOK_FALLBACK_NUMPY")
    if fallback and int(importlib.metadata.version("numpy").split(".")[0]) >= 2:
        env["TRITONBOOK_STUB_NUMPY"] = fallback
    for name in ("TRITON_URL", "TRITON_GRPC_URL"):
        env.pop(name, None)
    for name, value in (extra or {}).items():
        before = env.get(name, "") if name in _PATH_LISTS else ""
        env[name] = os.pathsep.join(p for p in (value, before) if p)
    return env


def stub_ldd() -> list[str] | None:
    """``ldd``'s lines for the python backend stub this Python uses, with the server's
    library path (a missing ``libpython3.X`` shows as "not found"); None without ldd."""
    wheel = _wheel_paths()
    return _ldd(wheel.stub, wheel)


def _ldd(binary: str | os.PathLike, wheel: _Wheel) -> list[str] | None:
    """``ldd``'s lines for ``binary``, with the server's library path; None without ldd."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    result = subprocess.run([ldd, str(binary)], capture_output=True, text=True,
                            env=_server_environment(wheel))
    return result.stdout.splitlines()


def _check_stub_libraries(stub: Path, wheel: _Wheel) -> None:
    """Fail early, and clearly, when the stub cannot find libpython3.X."""
    lines = _ldd(stub, wheel)
    if lines is None:
        return
    missing = [line.split()[0] for line in lines if "not found" in line]
    if missing:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise TritonServerError(
            f"the python backend stub cannot find {', '.join(missing)}. It embeds "
            f"libpython{version}: use a Python built with --enable-shared (pyenv: "
            f"PYTHON_CONFIGURE_OPTS=--enable-shared), or install Debian's libpython{version}"
        )


def shm_regions(prefix: str) -> list[Path]:
    """The regions in /dev/shm whose names start with ``prefix``."""
    return sorted(Path("/dev/shm").glob(f"{glob.escape(prefix)}*"))


def remove_shm_regions(prefix: str) -> list[str]:
    """Remove the /dev/shm regions named ``prefix...``; return their names."""
    return _unlink(shm_regions(prefix))


def _with_own_dev_shm(args: list[str], size: int) -> list[str]:
    """``args`` run with a ``/dev/shm`` of ``size`` bytes of its own, as ``docker run
    --shm-size`` gives a container: a tmpfs mounted over ``/dev/shm`` in a private mount
    namespace (``unshare``; as root, or through a user namespace otherwise). The server
    and its stubs see only that tmpfs, which goes away with the last of them."""
    if shutil.which("unshare") is None:
        raise TritonServerError("dev_shm_bytes needs unshare (util-linux), which is not on PATH")
    unshare = ["unshare", "--mount"]
    if os.geteuid() != 0:
        unshare += ["--user", "--map-root-user"]
    probe = subprocess.run([*unshare, "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise TritonServerError(
            "cannot give the server a /dev/shm of its own here (unshare and mount said: "
            f"{probe.stderr.strip() or probe.returncode}); it needs root or unprivileged "
            "user namespaces")
    # exec: the server keeps the process id that Popen returns.
    mount_then_run = 'mount -t tmpfs -o size="$0" tmpfs /dev/shm && exec "$@"'
    return [*unshare, "sh", "-c", mount_then_run, str(int(size)), *args]


def remove_orphaned_shm_regions() -> list[str]:
    """Remove the regions of embedded servers whose starting process is gone (a kernel
    killed with its server, a crash before stop()); return their names. Regions of a
    live process's server are left alone, whoever owns them."""
    return _unlink(
        region for region in shm_regions(SHM_PREFIX)
        if (owner := _SHM_OWNER.match(region.name)) and not _alive(int(owner.group(1))))


def _unlink(regions) -> list[str]:
    removed = []
    for region in regions:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            region.unlink()
            removed.append(region.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@contextlib.contextmanager
def _fork_notice_silenced():
    """While Popen forks, send this process's file descriptor 2 to /dev/null.

    Once an asyncio gRPC client has run in a notebook's event loop, grpcio keeps a poller
    thread, and at every fork its handler writes "Other threads are currently calling
    into gRPC, skipping fork() handlers" to descriptor 2, which the notebook shows. The
    child execs at once, so the handlers it skips have nothing to do; the server's own
    output goes to its log, and Popen's errors come back as exceptions.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # PR_SET_PDEATHSIG = 1: the kernel sends SIGTERM to tritonserver when we die.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _http_status(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def _strip_scheme(url: str) -> str:
    for scheme in ("http://", "https://", "grpc://"):
        if url.startswith(scheme):
            return url[len(scheme):].rstrip("/")
    return url.rstrip("/")
