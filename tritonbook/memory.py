"""Host memory of an embedded Triton server: the server process and its python stubs.

Linux reports what a process holds in RAM in ``/proc/PID/status``, in three parts:

* ``RssAnon``: heap and stacks, what ``malloc`` handed out and has not given back;
* ``RssFile``: mapped files, the binaries and shared libraries;
* ``RssShmem``: shared memory. The python backend's ``/dev/shm`` regions, which the
  server and a stub share, count in both.

A python model (and each stand-in of the book's embedded server) runs in stub processes,
children of ``tritonserver``: one per model instance. This module reads those numbers
for a server this process started (``server.EmbeddedTriton``, which knows its pid), runs
the chapter 12 loads against it, and starts servers with another ``malloc``
(``ALLOCATORS``).

    with server.EmbeddedTriton(environment=allocator_environment("jemalloc")) as triton:
        triton.load("batch_python")
        print(table(processes(triton)))
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tritonbook import profile

MIB = 1024 * 1024
# Where Debian and Ubuntu put shared libraries: the packages of the README's apt line
# (libtcmalloc-minimal4, libjemalloc2). The NGC container has gperftools' full tcmalloc
# (libtcmalloc.so.4) and libjemalloc instead (server build.py, r24.10 and r26.08).
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
LIBRARIES = {
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "jemalloc": ("libjemalloc.so.2",),
}
# The allocators chapter 12 compares, by name: what each adds to the server's environment
# (the stubs inherit it). The container's image sets TCMALLOC_RELEASE_RATE=200 for those who
# preload tcmalloc (server build.py, r24.10 and r26.08), so the book's tcmalloc run does too.
ALLOCATORS = ("glibc", "glibc, 2 arenas", "tcmalloc", "jemalloc")
INSTALL_HINT = "apt-get install -y libtcmalloc-minimal4 libjemalloc2 (the README's line)"


def library(name: str) -> Path:
    """The shared library of allocator ``name`` (``tcmalloc`` or ``jemalloc``) here."""
    for directory in LIBRARY_DIRS:
        for filename in LIBRARIES[name]:
            path = Path(directory) / filename
            if path.exists():
                return path
    raise FileNotFoundError(f"no {name} library in {', '.join(LIBRARY_DIRS)}: {INSTALL_HINT}")


def allocator_environment(name: str) -> dict[str, str]:
    """The variables that make a server (and its stubs) use allocator ``name``."""
    if name == "glibc":
        return {}
    if name == "glibc, 2 arenas":
        # glibc gives each thread that contends for the heap an arena of its own, up to
        # 8 per core on 64-bit machines; freed memory stays in its arena.
        return {"MALLOC_ARENA_MAX": "2"}
    if name == "tcmalloc":
        return {"LD_PRELOAD": str(library("tcmalloc")), "TCMALLOC_RELEASE_RATE": "200"}
    if name == "jemalloc":
        return {"LD_PRELOAD": str(library("jemalloc"))}
    raise ValueError(f"unknown allocator {name!r}: one of {ALLOCATORS}")


@dataclass(frozen=True)
class Usage:
    """One process's resident memory, in MiB."""

    pid: int
    role: str  # "server", or the model instance a stub serves
    anon: float
    file: float
    shmem: float

    def row(self) -> dict:
        return {"process": self.role, "pid": self.pid, "RssAnon (MiB)": round(self.anon, 1),
                "RssFile (MiB)": round(self.file, 1), "RssShmem (MiB)": round(self.shmem, 1)}


def usage(pid: int, role: str = "") -> Usage:
    """``/proc/PID/status``'s resident memory of process ``pid``. ProcessLookupError when
    it has exited (a process that has exited and not been reaped shows no memory)."""
    fields = {}
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        raise ProcessLookupError(f"process {pid} has exited") from None
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "RssShmem"):
            fields[key] = int(value.split()[0]) * 1024 / MIB  # kB
    if len(fields) < 3:
        raise ProcessLookupError(f"process {pid} has exited")
    return Usage(pid, role, fields["RssAnon"], fields["RssFile"], fields["RssShmem"])


def stubs(server_pid: int) -> dict[int, str]:
    """The live python stubs of the server ``server_pid``: pid -> the instance each
    serves (``production.stub_processes``, every model's)."""
    from tritonbook.production import stub_processes

    found = {}
    for process in stub_processes(server_pid):
        try:
            # The stub's arguments: model.py, its shm region, two sizes, the server's
            # pid, the backend's folder, a handle, then the instance's name.
            found[process.pid] = process.cmdline()[8]
        except Exception:  # gone while we looked
            continue
    return found


def _pid(triton) -> int:
    pid = getattr(triton, "pid", None)
    if pid is None:
        raise TypeError("process memory needs a server this process started "
                        "(server.EmbeddedTriton): a server at TRITON_URL shows no pid")
    return pid


def processes(triton) -> list[Usage]:
    """The server's memory, then each of its stubs'."""
    pid = _pid(triton)
    found = [usage(pid, "tritonserver")]
    for stub, instance in sorted(stubs(pid).items()):
        try:
            found.append(usage(stub, f"stub of {instance}"))
        except ProcessLookupError:
            continue
    return found


def table(usages: list[Usage]):
    import pandas as pd

    return pd.DataFrame([u.row() for u in usages]).set_index("process")


def preloaded(triton) -> list[str]:
    """Which of ``LIBRARIES`` the server process has mapped (``/proc/PID/maps``)."""
    maps = Path(f"/proc/{_pid(triton)}/maps").read_text()
    return [name for name, files in LIBRARIES.items() if any(f in maps for f in files)]


@dataclass
class Reloads:
    """What a reload loop left: one row per cycle (its seconds, the stubs running, the
    server's and the stubs' RssAnon in MiB), and how the server failed, if it did."""

    rows: list[dict]
    failure: str | None = None

    def summary(self, label: str) -> str:
        if not self.rows:
            return f"{label}: the server {self.failure} at the first cycle"
        each = sum(r["seconds"] for r in self.rows) / len(self.rows)
        heap = max(r["server_anon"] + r["stubs_anon"] for r in self.rows)
        line = (f"{label}: {len(self.rows)} cycles of {each:.2f} s, up to "
                f"{max(r['stubs'] for r in self.rows)} stubs and {heap:.0f} MiB")
        return line + (f"; then the server {self.failure}" if self.failure else "")


def reload_cycles(triton, model: str, cycles: int, *, finished: bool,
                  config: dict | None = None, timeout: float = 30.0) -> Reloads:
    """Unload and load ``model`` ``cycles`` times, through ``Triton.unload`` (``finished``:
    wait until the unload has finished, its stubs gone; otherwise only until the model
    takes no more requests). The quick profile runs fewer cycles. A server that dies or
    stops answering ends the loop, and ``failure`` says how (24.10 has crashed in the
    loop that does not wait: chapter 12)."""
    pid = _pid(triton)
    cycles = profile.reloads(cycles)
    result = Reloads([])
    for cycle in range(1, cycles + 1):
        start = time.perf_counter()
        try:
            triton.unload(model, wait=timeout, finished=finished)
            triton.load(model, config=config)
        except Exception:
            crashed = triton.process.poll() is not None or "Signal (" in triton.log()
            result.failure = (f"crashed ({_signal_line(triton.log())})" if crashed
                              else "stopped answering")
            return result
        result.rows.append({"cycle": cycle, "seconds": time.perf_counter() - start,
                            "stubs": len(stubs(pid)), "server_anon": usage(pid).anon,
                            "stubs_anon": _stub_anon(pid)})
    return result


def _signal_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.startswith("Signal (")]
    return lines[-1] if lines else "exited"


def reload_test(cycles: int, *, finished: bool, model: str = "batch_python") -> Reloads:
    """``reload_cycles`` on a fresh embedded server, stopped afterwards (killed if it
    hangs or has crashed)."""
    from tritonbook import server

    triton = server.EmbeddedTriton()
    try:
        triton.load(model)
        return reload_cycles(triton, model, cycles, finished=finished)
    finally:
        with contextlib.suppress(Exception):
            triton.stop()


@dataclass
class Traffic:
    """Memory over a run of requests: samples of (answered, server MiB, stubs MiB), the
    RssAnon after the run and an idle second (``retained``), and the highest sample."""

    allocator: str
    samples: list[tuple[int, float, float]] = field(default_factory=list)
    retained_server: float = float("nan")
    retained_stubs: float = float("nan")
    requests: int = 0

    @property
    def peak_server(self) -> float:
        return max(s[1] for s in self.samples)


def _stub_anon(pid: int) -> float:
    total = 0.0
    for stub in stubs(pid):
        try:
            total += usage(stub).anon
        except ProcessLookupError:
            continue
    return total


def image_traffic(triton, requests: int, *, allocator: str = "", threads: int = 8,
                  largest: int = 800, seed: int = 0, every: float = 0.1,
                  idle: float = 1.0) -> Traffic:
    """``requests`` images of random sizes (3 x s x s, s from 32 to ``largest``) to
    ``batch_python`` from ``threads`` HTTP clients, each answer checked (1 - image).
    Samples the server's and stubs' RssAnon every ``every`` seconds; ``retained`` is read
    after ``idle`` seconds without requests. The quick profile sends fewer requests."""
    import tritonclient.http as httpclient

    pid = _pid(triton)
    requests = profile.memory_requests(requests)
    result = Traffic(allocator, requests=requests)
    lock = threading.Lock()
    sent = [0]
    answered = [0]
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        rng = np.random.default_rng([seed, index])
        client = httpclient.InferenceServerClient(triton.http_url, network_timeout=120)
        try:
            while not errors:
                with lock:
                    if sent[0] >= requests:
                        return
                    sent[0] += 1
                side = int(rng.integers(32, largest + 1))
                image = rng.random((1, 3, side, side), dtype=np.float32)
                given = httpclient.InferInput("IMAGE", list(image.shape), "FP32")
                given.set_data_from_numpy(image)
                wanted = [httpclient.InferRequestedOutput("INVERTED")]
                answer = client.infer("batch_python", [given], outputs=wanted)
                np.testing.assert_allclose(answer.as_numpy("INVERTED"), 1 - image, atol=1e-6)
                with lock:
                    answered[0] += 1
        except BaseException as exc:  # raised below, in the caller's thread
            errors.append(exc)
        finally:
            client.close()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for one in workers:
        one.start()
    while any(one.is_alive() for one in workers):
        result.samples.append((answered[0], usage(pid).anon, _stub_anon(pid)))
        time.sleep(every)
    for one in workers:
        one.join()
    if errors:
        raise errors[0]
    result.samples.append((answered[0], usage(pid).anon, _stub_anon(pid)))
    time.sleep(idle)
    result.retained_server = usage(pid).anon
    result.retained_stubs = _stub_anon(pid)
    return result


def allocator_run(name: str, requests: int, *, environment: dict[str, str] | None = None,
                  **kwargs) -> Traffic:
    """A fresh embedded server with allocator ``name`` (and ``environment`` besides),
    ``batch_python`` loaded without its wait, then ``image_traffic``. Checks that a
    preloaded allocator is mapped in the server process, and stops the server."""
    from tritonbook import server
    from tritonbook.repository import read_config

    config = read_config("batch_python")
    config["parameters"]["WAIT_MS"] = {"string_value": "0"}
    variables = {**allocator_environment(name), **(environment or {})}
    with server.EmbeddedTriton(environment=variables) as triton:
        triton.load("batch_python", config=config)
        mapped = preloaded(triton)
        expected = [name] if name in LIBRARIES else []
        if mapped != expected:
            raise RuntimeError(f"{name}: the server maps {mapped or 'no preloaded allocator'}")
        return image_traffic(triton, requests, allocator=name, **kwargs)


def plot_reloads(loops: dict[str, Reloads]):
    """Stubs alive (left) and all processes' RssAnon (right) after each load."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for label, loop in loops.items():
        cycles = [r["cycle"] for r in loop.rows]
        left.plot(cycles, [r["stubs"] for r in loop.rows], marker="o", label=label)
        right.plot(cycles, [r["server_anon"] + r["stubs_anon"] for r in loop.rows],
                   marker="o", label=label)
    left.set_ylabel("stub processes running")
    right.set_ylabel("RssAnon, server + stubs (MiB)")
    for ax in (left, right):
        ax.set_xlabel("reload cycle")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    left.legend()
    fig.tight_layout()
    return fig


def plot_traffic(runs: dict[str, Traffic]):
    """The server's RssAnon over the requests (left), and what each allocator kept after
    an idle second (right), one line and one bar per allocator."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6),
                                      gridspec_kw={"width_ratios": [3, 2]})
    for name in sorted(runs, key=lambda n: ALLOCATORS.index(n) if n in ALLOCATORS else 99):
        run = runs[name]
        left.plot([s[0] for s in run.samples], [s[1] for s in run.samples], label=name)
    left.set_xlabel("requests answered")
    left.set_ylabel("tritonserver RssAnon (MiB)")
    left.legend(fontsize=8)
    names = [n for n in ALLOCATORS if n in runs] + [n for n in runs if n not in ALLOCATORS]
    right.bar(names, [runs[n].retained_server for n in names], label="tritonserver")
    right.bar(names, [runs[n].retained_stubs for n in names],
              bottom=[runs[n].retained_server for n in names], label="stub")
    right.set_ylabel("RssAnon after an idle second (MiB)")
    right.tick_params(axis="x", labelsize=8, rotation=20)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
