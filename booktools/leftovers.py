"""A pytest plugin: each notebook leaves no process and no /dev/shm entry behind.

    python -m pytest notebooks/*.ipynb --nbval-lax -p booktools.leftovers

The book promises that a notebook stops what it started: its embedded server, the
server's python stubs, ``perf_analyzer``, and the shared-memory regions and named
semaphores they make in /dev/shm. nbval stops a notebook's kernel by killing it, so
whatever the kernel did not clean up in its own cells stays. After each notebook (its
kernel stopped), this plugin waits up to ``SETTLE_S`` for the stragglers to go, then
names what is left: a /dev/shm entry made during the notebook that no live process
maps, and one of the book's programs (``BOOK_PROCESSES``) started during the notebook
and left to init: a process whose parent died is handed to pid 1, so an orphan's line
of parents reaches 1 without passing a process older than the notebook (a stub of a
server started separately, ``TRITON_URL``, is that server's and is not counted; a
process entered from outside this pid namespace, parent 0, is nobody's orphan). It
removes what it found, so that the next notebook starts clean, fails the run, and says
what it found again as the run's last line, where a CI log's tail shows it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from booktools.execute import parent_pids

SHM = Path("/dev/shm")
# How long the stragglers get to go (the ini option leftovers_settle_s; the plugin's own
# tests, which leave things on purpose, wait less).
SETTLE_S = 30.0
# What a notebook starts, by the program it runs (argv[0]'s file name, or the module of
# ``python -m``): the only processes this plugin counts (and kills), so that nothing
# else on a reader's machine is touched, not even a ``pgrep -f tritonserver``.
BOOK_PROCESSES = ("tritonserver", "triton_python_backend_stub", "perf_analyzer",
                  "ipykernel_launcher")

_before: dict[str, tuple[set[str], set[int]]] = {}
_found: list[str] = []


def shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM))
    except FileNotFoundError:
        return set()


def mapped_inodes(pid: int | None = None) -> set[int]:
    """Inodes of the /dev/shm files some live process maps, or process ``pid`` maps (a
    named semaphore is mapped under the temporary name it was made with, so names would
    not do)."""
    inodes = set()
    for maps in Path("/proc").glob(f"{pid if pid is not None else '[0-9]*'}/maps"):
        try:
            lines = maps.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                inodes.add(int(fields[4]))
    return inodes


def unmapped_after(names: set[str] | list[str], wait_s: float = 5.0) -> list[str]:
    """Of the /dev/shm entries ``names``, those that no live process maps now and that are
    still there, still unmapped, ``wait_s`` later: left behind. One whose process has
    just ended gets ``wait_s`` to be unlinked by its owner (a resource tracker, a
    server of a test running beside the caller); one in use is mapped."""
    def unmapped(candidates) -> set[str]:
        inodes, found = mapped_inodes(), set()
        for name in candidates:
            try:
                if (SHM / name).stat().st_ino not in inodes:
                    found.add(name)
            except FileNotFoundError:
                pass
        return found

    first = unmapped(names)
    if first:
        time.sleep(wait_s)
    return sorted(unmapped(first))


def orphaned(parents: dict[int, int], pids_before: set[int]) -> list[int]:
    """The processes in ``parents`` (pid -> parent pid) started since ``pids_before``
    and left to init: up the line of parents, owned at the first one older than the
    notebook (this run, a separately started server), an orphan at init (pid 1),
    nobody's at parent 0 (entered from outside this pid namespace)."""
    found = []
    for pid in parents:
        if pid in pids_before:
            continue
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1) and ancestor not in pids_before:
            ancestor = parents.get(ancestor)
        if ancestor == 1:
            found.append(pid)
    return found


def left_behind(shm_before: set[str], pids_before: set[int]) -> tuple[list[str], list[int]]:
    """What a notebook left: its unmapped /dev/shm entries and its orphaned processes."""
    live = parent_pids()
    orphans = [pid for pid in orphaned(live, pids_before)
               if program(pid) in BOOK_PROCESSES]
    inodes = mapped_inodes()
    entries = []
    for name in sorted(shm_entries() - shm_before):
        try:
            if (SHM / name).stat().st_ino not in inodes:
                entries.append(name)
        except FileNotFoundError:
            pass
    return entries, orphans


def program(pid: int) -> str:
    """What ``pid`` runs: argv[0]'s file name, or the module after ``python -m``."""
    argv = _command(pid).split()
    if not argv:
        return "?"
    if "-m" in argv[:-1] and os.path.basename(argv[0]).startswith("python"):
        return argv[argv.index("-m") + 1]
    return os.path.basename(argv[0])


def _command(pid: int) -> str:
    try:
        line = (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return line.replace(b"\0", b" ").decode(errors="replace").strip()


def _made(path: Path) -> str:
    """When an entry was last written, and its size: which cell made it, in a log."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "gone"
    written = time.strftime("%H:%M:%S", time.localtime(stat.st_mtime))
    return f"{stat.st_size} bytes, written {written}"


def pytest_addoption(parser):
    parser.addini("leftovers_settle_s", "seconds the stragglers of a notebook get to go",
                  default=str(SETTLE_S))


def remove_left_behind(name: str, shm_before: set[str], pids_before: set[int],
                       settle_s: float = SETTLE_S) -> list[str]:
    """After a notebook whose kernel is stopped: wait up to ``settle_s`` for its
    stragglers, then remove what is still left and say what it was, a line each."""
    deadline = time.monotonic() + settle_s
    while True:
        entries, orphans = left_behind(shm_before, pids_before)
        if not (entries or orphans) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    found = []
    for entry in entries:
        found.append(f"{name}: /dev/shm/{entry} ({_made(SHM / entry)})")
        (SHM / entry).unlink(missing_ok=True)
    for pid in orphans:
        found.append(f"{name}: process {pid}: {_command(pid)[:120]}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = str(item.path)
    if path not in _before:
        _before[path] = (shm_entries(), set(parent_pids()))
    yield
    if nextitem is not None and str(nextitem.path) == path:
        return
    # The notebook's last cell ran and its kernel is stopped.
    _found.extend(remove_left_behind(os.path.relpath(path), *_before[path],
                                     float(item.config.getini("leftovers_settle_s"))))


def pytest_terminal_summary(terminalreporter):
    if _found:
        terminalreporter.section("left behind by the notebooks (removed)")
        for line in _found:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    if _found:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    # Once more after the "N passed" line: a CI log is often read from its tail, and
    # a run that failed with every test passed must say why there.
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _found and reporter is not None:
        reporter.write_line(
            f"FAILED: the notebooks left {len(_found)} thing(s) behind: "
            + "; ".join(_found)
        )
