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
from a quick run or from other code cells. On a GPU the provenance names it, with its
driver, and the device the cells used (``tritonbook.device``).

The same runner makes CI's first pass and the GPU run; options say how:

* ``--out DIR`` writes each executed copy under ``DIR`` (at the notebook's path)
  instead of over the committed notebook; the kernel still starts in the notebook's
  folder.
* ``--check`` is CI's first pass (``make test``): after each notebook, nothing of its
  own may be left running or in /dev/shm (``booktools.leftovers``), the cells marked
  ``# NBVAL_CHECK_OUTPUT`` must print what the committed copy printed (sanitised with
  ``notebooks/sanitize.cfg``, compared as nbval compares them), and each notebook's time
  is set beside its budget (``booktools.budget``). Any failure fails the run, at the end.
* ``--plan gpu`` is the GPU run (``make book-gpu``): each notebook runs in the profile
  and within the seconds ``booktools/budgets.json`` gives it for the GPU; a failing
  cell is recorded (``tritonbook.failed_cells``) and the run goes on; a notebook still
  running at its budget is stopped there (``tritonbook.stopped``). ``--jobs N`` runs N
  notebooks at once, each in its own runner process, and ``--archive FILE`` packs the
  executed copies and a summary (``gpu_run.json``) into one ``.tar.gz``.
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


def execute(path: Path, timeout: int = 1800, *, out: Path | None = None,
            keep_going: bool = False, budget_s: float | None = None,
            profile: str | None = None, jobs: int = 1) -> float:
    """Run one notebook top to bottom in a fresh kernel; write the executed copy over it
    (or to ``out``, a file path). ``keep_going`` records failing cells and runs on;
    ``budget_s`` stops the notebook when it has run that long; ``profile`` is the
    kernel's TRITONBOOK_PROFILE; ``jobs`` is how many notebooks run beside it (recorded)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        allow_errors=keep_going,
        # One stream output per name, with carriage returns applied as a terminal would:
        # a progress bar is stored as its last state, not as one line per update.
        coalesce_streams=True,
        # No per-cell timestamps: committed notebooks should diff by their outputs only.
        record_timing=False,
    )
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":  # a cell the run never reaches shows nothing stale
            cell.outputs, cell.execution_count = [], None
    # This interpreter's kernel, whatever kernelspecs the machine has installed.
    client.kernel_manager_class = _current_env_kernel_manager()
    cell_seconds: dict[int, float] = {}
    deadline = None if budget_s is None else time.monotonic() + budget_s

    def cell_starts(cell, cell_index):
        cell_seconds[cell_index] = -time.perf_counter()
        if deadline is not None:  # the cell may take what is left of the budget
            client.timeout = max(1, int(deadline - time.monotonic()))

    client.on_cell_execute = cell_starts
    client.on_cell_executed = lambda cell, cell_index, execute_reply: cell_seconds.__setitem__(
        cell_index, cell_seconds[cell_index] + time.perf_counter())
    env = dict(os.environ)
    if profile is not None:
        env["TRITONBOOK_PROFILE"] = profile
    executed = datetime.now(timezone.utc).isoformat(timespec="seconds")
    cpu_before = _children_cpu_seconds()
    started = time.perf_counter()
    succeeded, stopped = False, None
    try:
        with ProcessTreeMemory() as memory:
            # Ends by shutting the kernel down and waiting for it.
            client.execute(env=env)
        succeeded = True
    except CellTimeoutError:
        if deadline is None:
            raise
        running = next((i for i, s in cell_seconds.items() if s < 0), None)
        stopped = f"stopped in cell {running} at its budget of {budget_s:g} s"
    finally:
        seconds = time.perf_counter() - started
        timed = {i: s for i, s in cell_seconds.items() if s >= 0}
        slowest = sorted(timed.items(), key=lambda item: -item[1])[:3]
        failed = failed_cells(notebook)
        notebook.metadata["tritonbook"] = {
            "run_seconds": round(seconds, 1), "executed": executed,
            "succeeded": succeeded and not failed,
            "cpu_seconds": round(_children_cpu_seconds() - cpu_before, 1),
            "peak_memory_gib": round(memory.peak_bytes / 2**30, 2),
            "slowest_cells": [{"cell": index, "seconds": round(s, 1)} for index, s in slowest],
            **({"failed_cells": failed} if failed else {}),
            **({"stopped": stopped} if stopped else {}),
            "provenance": provenance(notebook, timed, profile=profile, jobs=jobs)}
        target = out or path
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, target)
        if out is None:  # the committed copy: a full run's verdicts join the record
            from booktools import record

            if record.append(path, notebook):
                record.write_page()
    return seconds


def failed_cells(notebook) -> list[dict]:
    """Each cell whose outputs hold an error: its index in the notebook's cells, and the
    error's name and first line."""
    failed = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error":
                message = (output.get("evalue") or "").strip().splitlines()
                failed.append({"cell": index, "error": f"{output.get('ename')}: "
                                                      f"{message[0] if message else ''}"[:300]})
    return failed


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
    try:  # a lent GPU machine gets a copy of the tree, maybe without git
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    except OSError:
        return ""
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


def gpu() -> str:
    """The first GPU's name and driver, as nvidia-smi gives them ("" without one)."""
    import subprocess

    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    line = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    name, _, driver = line.partition(",")
    return f"{name.strip()}, driver {driver.strip()}" if line else ""


def provenance(notebook, cell_seconds: dict[int, float], profile: str | None = None,
               jobs: int = 1) -> dict:
    """Where a run's outputs came from (the module docstring lists the fields)."""
    from importlib import metadata

    from tritonbook import device
    from tritonbook import profile as profiles

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return ""

    return {
        "profile": profile or profiles.current().name,
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
        "device": device.describe(),
        **({"gpu": gpu()} if device.selected() == "cuda" else {}),
        # Notebooks run at once share the machine, and so their timings do.
        **({"jobs": jobs} if jobs > 1 else {}),
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
    from jupyter_client.manager import AsyncKernelManager

    # Asynchronous, as nbclient's own default: its cell timeout (and so a notebook's
    # budget) holds only with an asynchronous client.
    class CurrentEnvKernelManager(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            return [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]

    return CurrentEnvKernelManager


ROOT = Path(__file__).resolve().parent.parent
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
# What nbval leaves out of a comparison (its defaults, without nbdime).
NOT_COMPARED = {"metadata", "traceback", "prompt_number", "output_type", "name",
                "execution_count", "application/vnd.jupyter.widget-view+json",
                "image/png", "image/jpeg"}


def sanitize_patterns(path: Path = ROOT / "notebooks" / "sanitize.cfg") -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of nbval's sanitize file, in its order."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    return [(parser[name]["regex"], parser[name]["replace"]) for name in parser.sections()]


def checked_output_differences(committed, executed, patterns) -> list[str]:
    """The code cells marked ``# NBVAL_CHECK_OUTPUT`` whose outputs differ between two
    copies of a notebook, compared as nbval compares them: streams joined by name, each
    output's fields (and its data's MIME types) but those nbval skips, sanitised."""
    import re
    from collections import defaultdict

    from nbval.plugin import transform_streams_for_comparison

    def clean(value):
        if not isinstance(value, str):
            return value
        for regex, replacement in patterns:
            value = re.sub(regex, replacement, value)
        return value

    def flat(outputs) -> dict:
        fields = defaultdict(list)
        for output in transform_streams_for_comparison(outputs):
            for key, value in output.items():
                if key == "data":
                    for kind, content in value.items():
                        if kind not in NOT_COMPARED:
                            fields[kind].append(clean(content))
                elif key not in NOT_COMPARED:
                    fields[key].append(clean(value))
        return dict(fields)

    differ = []
    pairs = zip(committed.cells, executed.cells)
    for index, (want, got) in enumerate(pairs):
        if want.cell_type == "code" and CHECK_MARK in want.source:
            if flat(want.outputs) != flat(got.outputs):
                differ.append(f"cell {index}: its outputs differ from the committed ones")
    return differ


def plan(name: str) -> dict[str, dict]:
    """A run plan of budgets.json: notebook -> {"seconds": budget, "profile": profile}."""
    import json

    return json.loads((ROOT / "booktools" / "budgets.json").read_text())[name]


def _relative(path: Path) -> str:
    return os.path.relpath(path.resolve(), ROOT)


def _placed(path: Path) -> str:
    """Where a notebook's copy goes under ``--out`` and in an archive: its path in the
    tree, or its name for a notebook outside the tree."""
    relative = _relative(path)
    return path.name if relative.startswith("..") else relative


def _run_one(path: Path, args, out: Path | None, step: dict | None) -> str:
    """Execute one notebook (in a runner process of its own when ``--jobs`` > 1); the
    line that says how it went."""
    import subprocess

    budget_s = step["seconds"] if step else None
    profile = step["profile"] if step else None
    if args.jobs > 1:
        command = [sys.executable, "-m", "booktools.execute", str(path), "--beside",
                   str(args.jobs), "--timeout", str(args.timeout)]
        command += ["--out", str(args.out)] if args.out else []
        command += ["--keep-going"] if args.keep_going else []
        command += ["--budget-s", str(budget_s)] if budget_s else []
        command += ["--profile", profile] if profile else []
        done = subprocess.run(command, capture_output=True, text=True)
        return done.stdout.strip() + (f"\n{done.stderr[-2000:]}" if done.returncode else "")
    try:
        seconds = execute(path, args.timeout, out=out, keep_going=args.keep_going,
                          budget_s=budget_s, profile=profile, jobs=args.beside or args.jobs)
    except Exception as exc:  # report every failing notebook, then fail
        return f"{_relative(path)}: FAILED: {type(exc).__name__}: {str(exc)[-2000:]}"
    written = out or path
    run = __import__("json").loads(written.read_text())["metadata"]["tritonbook"]
    how = f"{_relative(path)}: done in {seconds:.1f} s"
    if profile:
        how += f" ({profile} profile, budget {budget_s:g} s)"
    if run.get("failed_cells"):
        how += f"; FAILED cells: {run['failed_cells']}"
    if run.get("stopped"):
        how += f"; {run['stopped']}"
    return how + "\n  " + _cell_costs(written)


def archive(out: Path, notebooks: list[Path], destination: Path) -> Path:
    """One .tar.gz of the executed copies under ``out`` and ``gpu_run.json``, a summary
    of each: time, profile, budget, failed cells, where it stopped, its provenance."""
    import json
    import tarfile

    summary = {}
    for path in notebooks:
        copy = out / _placed(path)
        run = json.loads(copy.read_text())["metadata"]["tritonbook"] if copy.exists() else {}
        summary[_placed(path)] = {key: run.get(key) for key in (
            "run_seconds", "succeeded", "failed_cells", "stopped", "provenance")}
    (out / "gpu_run.json").write_text(json.dumps(summary, indent=1) + "\n")
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(destination, "w:gz") as tar:
        tar.add(out / "gpu_run.json", arcname="gpu_run.json")
        for path in notebooks:
            if (out / _placed(path)).exists():
                tar.add(out / _placed(path), arcname=_placed(path))
    return destination


def publish(packed: Path, into: Path = ROOT / "book" / "gpu") -> list[Path]:
    """The chapters of a ``make book-gpu`` archive as the book's GPU pages: each executed
    copy as ``into/<chapter>.ipynb``, with its code cells, outputs and provenance, and of
    its prose only the headings (the prose describes the CPU run, and its relative links
    would not resolve from another folder). ``book/_ext/gpu_copies.py`` links each page
    and its chapter both ways."""
    import re
    import tarfile

    import nbformat

    heading = re.compile(r"^#{1,6} ")
    written = []
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(packed) as tar:
        for member in tar.getmembers():
            if not member.name.endswith(".ipynb"):
                continue
            copy = nbformat.read(tar.extractfile(member), as_version=4)
            for cell in copy.cells:
                if cell.cell_type == "markdown":
                    cell.source = "\n\n".join(line for line in cell.source.splitlines()
                                               if heading.match(line))
            copy.cells = [c for c in copy.cells if c.cell_type == "code" or c.source]
            written.append(into / Path(member.name).name)
            nbformat.write(copy, written[-1])
    return written


def main(argv: list[str] | None = None) -> int:
    from concurrent.futures import ThreadPoolExecutor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("--out", type=Path, help="write the executed copies under this folder")
    parser.add_argument("--check", action="store_true", help="CI's first pass (see above)")
    parser.add_argument("--plan", help="the budgets.json plan to run by (gpu)")
    parser.add_argument("--keep-going", action="store_true", help="record failing cells, go on")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks at once")
    parser.add_argument("--archive", type=Path, help="pack the copies into this .tar.gz")
    parser.add_argument("--publish", action="store_true",
                        help="the arguments are make book-gpu archives: write book/gpu/")
    # Set by a runner for the runner process it starts per notebook (--jobs).
    parser.add_argument("--budget-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    parser.add_argument("--beside", type=int, help=argparse.SUPPRESS)  # its parent's --jobs
    args = parser.parse_args(argv)
    if args.publish:
        for packed in args.notebooks:
            for page in publish(packed):
                print(f"wrote {_relative(page)}")
        return 0
    if args.check and (args.jobs > 1 or not args.out):
        parser.error("--check runs one notebook at a time (what one leaves is its own) "
                     "and compares the copies in --out with the committed notebooks")
    steps = plan(args.plan) if args.plan else {}
    missing = [str(p) for p in args.notebooks if steps and _relative(p) not in steps]
    if missing:
        parser.error(f"not in the {args.plan} plan of budgets.json: {', '.join(missing)}")
    if args.budget_s or args.profile:  # one notebook, for a parent runner
        steps = {_relative(p): {"seconds": args.budget_s, "profile": args.profile}
                 for p in args.notebooks}
    # The longest first, so that N at once finish together.
    order = sorted(args.notebooks, key=lambda p: -(steps.get(_relative(p), {}).get("seconds") or 0))
    problems, seconds = [], {}

    def run(path: Path) -> str:
        out = args.out / _placed(path) if args.out else None
        if not args.check:
            return _run_one(path, args, out, steps.get(_relative(path)))
        from booktools import leftovers

        before = (leftovers.shm_entries(), set(parent_pids()))
        started = time.monotonic()
        line = _run_one(path, args, out, None)
        seconds[_relative(path)] = time.monotonic() - started
        found = leftovers.remove_left_behind(_relative(path), *before)
        found += [f"{_relative(path)}: {d}" for d in checked_output_differences(
            _read(path), _read(out or path), sanitize_patterns())] if "FAILED" not in line else []
        problems.extend(found + ([line.splitlines()[0]] if "FAILED" in line else []))
        return line + "".join(f"\n  {f}" for f in found)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for path, line in zip(order, pool.map(run, order)):
            print(line, flush=True)
            if "FAILED" in line and not args.check:
                problems.append(_relative(path))
    if args.check and seconds:
        from booktools import budget

        print(f"notebook times, {budget.current_pass()} pass, against {budget.BUDGETS.name}")
        for name, line in budget.verdicts(seconds, budget.budgets()):
            print(f"{name:<40} {line}")
            problems += [f"{name}: {line.strip()}"] if "FAILED" in line else []
        print(f"{'all notebooks':<40} {sum(seconds.values()):7.1f} s")
    if args.archive:
        print(f"archive: {archive(args.out or ROOT, order, args.archive)}")
    if problems:
        print("FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


def _read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


if __name__ == "__main__":
    sys.exit(main())
