"""Execute the book's notebooks in place, in this environment's kernel, and time them.

    python -m booktools.execute notebooks/*.ipynb

``make book`` runs this before building the HTML, so the committed notebooks carry the
outputs of a real run. Each notebook's wall time, the time the run started and whether it
succeeded are stored in its metadata (``tritonbook.run_seconds``, ``tritonbook.executed``,
``tritonbook.succeeded``); the workshop guide builds its schedules from them and the
book's execution table (``book/_ext/run_times.py``) shows them. What the run cost the
machine is stored beside them, for sizing a shared hub: ``tritonbook.cpu_seconds`` (the
kernel and every process it waited for: the embedded server, its python stubs,
perf_analyzer, compilers), ``tritonbook.peak_memory_gib`` (the largest proportional
set size, PSS, of all the processes this runner started, sampled every 2 s; a
server reached through ``TRITON_URL`` is not among them) and ``tritonbook.slowest_cells``
(the three longest code cells: index in the notebook's cells, seconds). Cells carry no
execution timestamps, so a re-run changes only the outputs and these fields.

``tritonbook.provenance`` says where the outputs came from (``provenance``): the
profile (``TRITONBOOK_PROFILE``), jupyter-cache's hash of the code cells, a hash of
each ``tritonbook`` module the code imports, the commit and whether the tree had
changes, the torch and tritonserver versions, the CPU, and the seconds of every code
cell. ``tests/test_provenance.py`` fails on a committed notebook whose outputs came
from a quick run or from other code cells.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path


def execute(path: Path, timeout: int = 1800) -> float:
    """Run one notebook top to bottom in a fresh kernel; write the outputs back."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # One stream output per name, with carriage returns applied as a terminal would:
        # a progress bar is stored as its last state, not as one line per update.
        coalesce_streams=True,
        # No per-cell timestamps: committed notebooks should diff by their outputs only.
        record_timing=False,
    )
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    # This interpreter's kernel, whatever kernelspecs the machine has installed.
    client.kernel_manager_class = _current_env_kernel_manager()
    cell_seconds: dict[int, float] = {}
    client.on_cell_execute = lambda cell, cell_index: cell_seconds.__setitem__(
        cell_index, -time.perf_counter())
    client.on_cell_executed = lambda cell, cell_index, execute_reply: cell_seconds.__setitem__(
        cell_index, cell_seconds[cell_index] + time.perf_counter())
    executed = datetime.now(timezone.utc).isoformat(timespec="seconds")
    cpu_before = _children_cpu_seconds()
    started = time.perf_counter()
    succeeded = False
    try:
        with ProcessTreeMemory() as memory:
            client.execute()  # ends by shutting the kernel down and waiting for it
        succeeded = True
    finally:
        seconds = time.perf_counter() - started
        slowest = sorted(cell_seconds.items(), key=lambda item: -item[1])[:3]
        notebook.metadata["tritonbook"] = {
            "run_seconds": round(seconds, 1), "executed": executed, "succeeded": succeeded,
            "cpu_seconds": round(_children_cpu_seconds() - cpu_before, 1),
            "peak_memory_gib": round(memory.peak_bytes / 2**30, 2),
            "slowest_cells": [{"cell": index, "seconds": round(s, 1)} for index, s in slowest],
            "provenance": provenance(notebook, cell_seconds)}
        nbformat.write(notebook, path)
    return seconds


def code_hash(notebook) -> str:
    """jupyter-cache's hash of a notebook's code cells (their sources and the kernel
    spec; not their outputs, metadata or the markdown), as ``jupyter-book``'s cache
    keys a notebook."""
    from jupyter_cache.cache.main import JupyterCacheBase

    # The method reads nothing of its instance.
    return JupyterCacheBase.create_hashed_notebook(None, notebook, cell_metadata=())[1]


def imported_modules(notebook) -> dict[str, str]:
    """The ``tritonbook`` modules a notebook's code imports, each with the sha256 of
    its source (the first 16 hex digits)."""
    import ast
    import hashlib

    package = Path(__file__).resolve().parent.parent / "tritonbook"
    names = set()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse("\n".join(line for line in cell.source.splitlines()
                                        if not line.lstrip().startswith(("%", "!"))))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tritonbook"):
                parts = node.module.split(".")
                names |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
    return {name: hashlib.sha256((package / f"{name}.py").read_bytes()).hexdigest()[:16]
            for name in sorted(names) if (package / f"{name}.py").exists()}


def _git(*args: str) -> str:
    import subprocess

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def machine() -> dict:
    """The CPU model, its cores, and whether it has AVX-512 (the CI budget's two cases)."""
    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = value
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "avx512": "avx512f" in flags.split()}


def provenance(notebook, cell_seconds: dict[int, float]) -> dict:
    """Where a run's outputs came from (the module docstring lists the fields)."""
    from importlib import metadata

    from tritonbook import profile

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return ""

    return {
        "profile": profile.current().name,
        "code_hash": code_hash(notebook),
        "modules": imported_modules(notebook),
        "commit": _git("rev-parse", "HEAD"),
        "tree_changed": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "torch": version("torch"),
        # The embedded tritonserver is the one inside this wheel (Triton 2.51 at the pin);
        # a server reached through TRITON_URL is named instead.
        "tritonserver": (f"TRITON_URL {os.environ['TRITON_URL']}" if os.environ.get("TRITON_URL")
                         else f"nvidia-pytriton {version('nvidia-pytriton')}"),
        **machine(),
        "cell_seconds": {str(i): round(s, 2) for i, s in sorted(cell_seconds.items())},
    }


def _cell_costs(path: Path) -> str:
    """The stored cost of a run, as one line for whoever waits on it."""
    import json

    costs = json.loads(path.read_text())["metadata"]["tritonbook"]
    slowest = ", ".join(f"cell {c['cell']} {c['seconds']} s" for c in costs["slowest_cells"])
    return (f"CPU {costs['cpu_seconds']} s, peak {costs['peak_memory_gib']} GiB, "
            f"slowest: {slowest}")


def _children_cpu_seconds() -> float:
    """User and system CPU time of every child this process has waited for, and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parent_pids() -> dict[int, int]:
    """Every live process's parent: pid -> parent pid, from /proc."""
    parents = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                # The name in parentheses may hold spaces; the parent follows the state.
                parents[int(entry.name)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone since the scan
    return parents


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for child, parent in parent_pids().items():
        children.setdefault(parent, []).append(child)
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def pss_bytes(pid: int) -> int:
    """A process's proportional set size: its private memory plus its share of what it
    shares (libraries, the server's /dev/shm regions); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class ProcessTreeMemory:
    """The peak summed PSS of this process's descendants, sampled every ``period`` s."""

    # Reading a process's PSS walks its page tables: for the book's torch processes
    # that costs the runner about a fifth of a core at two samples a second, time
    # taken from the measurements the notebook makes.
    def __init__(self, period: float = 2.0):
        self.period = period
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            total = sum(pss_bytes(pid) for pid in descendants(os.getpid()))
            self.peak_bytes = max(self.peak_bytes, total)
            if self._stop.wait(self.period):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _current_env_kernel_manager():
    from jupyter_client.manager import KernelManager

    class CurrentEnvKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            return [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]

    return CurrentEnvKernelManager


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args(argv)
    failed = []
    for path in args.notebooks:
        print(f"executing {path} ...", flush=True)
        try:
            seconds = execute(path, args.timeout)
        except Exception as exc:  # report every failing notebook, then fail
            print(f"  FAILED: {type(exc).__name__}: {str(exc)[-2000:]}", flush=True)
            failed.append(path)
        else:
            print(f"  done in {seconds:.1f} s", flush=True)
            print("  " + _cell_costs(path), flush=True)
    if failed:
        print("failed notebooks: " + ", ".join(map(str, failed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
