"""booktools.leftovers: a notebook that leaves a process or a /dev/shm entry fails the run."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from booktools import leftovers

ROOT = Path(__file__).resolve().parent.parent
# Alone: another test's server starting or stopping beside these would put its own
# processes and /dev/shm entries in the window they watch.
pytestmark = pytest.mark.serial


def run_notebook(tmp_path, *cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    path = tmp_path / "leaky.ipynb"
    nbformat.write(notebook, path)
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(path), "--nbval-lax", "--nbval-current-env",
         "-p", "booktools.leftovers", "-p", "no:cacheprovider", "-q",
         # What is left on purpose stays: 3 s to go, not the 30 a notebook gets.
         "-o", "leftovers_settle_s=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
    )


def test_a_clean_notebook_passes(tmp_path):
    done = run_notebook(tmp_path, "print(1 + 1)")
    assert done.returncode == 0, done.stdout[-2000:]
    assert "left behind" not in done.stdout


def test_a_shm_entry_nobody_maps_fails_the_run_and_is_removed(tmp_path):
    name = f"tritonbook-test-{uuid.uuid4().hex[:8]}"
    done = run_notebook(
        tmp_path, f"open('/dev/shm/{name}', 'wb').write(b'x' * 64)"
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert f"leaky.ipynb: /dev/shm/{name}" in done.stdout
    # The last line says it too, after the summary.
    assert f"/dev/shm/{name}" in done.stdout.strip().splitlines()[-1]
    assert not os.path.exists(f"/dev/shm/{name}")


def test_a_shm_entry_still_mapped_is_not_counted(tmp_path):
    # An entry that a live process maps is in use, not left behind: the notebook starts
    # a holder that makes and maps one, and outlives the kernel.
    name = f"tritonbook-test-{uuid.uuid4().hex[:8]}"
    holder = (
        f"import mmap, time; f = open('/dev/shm/{name}', 'w+b'); f.write(bytes(4096)); "
        "f.flush(); m = mmap.mmap(f.fileno(), 4096); print('mapped', flush=True); "
        "time.sleep(60)"
    )
    try:
        done = run_notebook(
            tmp_path,
            "import subprocess, sys\n"
            f"holder = subprocess.Popen([sys.executable, '-c', {holder!r}],"
            " stdout=subprocess.PIPE, start_new_session=True)\n"
            "holder.stdout.readline()",
        )
    finally:
        subprocess.run(["pkill", "-f", name], check=False)
        Path("/dev/shm", name).unlink(missing_ok=True)
    assert done.returncode == 0, done.stdout[-2000:]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_an_orphaned_book_process_fails_the_run_and_is_killed(tmp_path):
    done = run_notebook(
        tmp_path,
        "import subprocess\n"
        # Named like the book's load generator, in a session of its own so that the
        # kernel's death does not take it along.
        "subprocess.Popen(['bash', '-c', 'exec -a perf_analyzer sleep 60'],"
        " start_new_session=True)",
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "leaky.ipynb: process" in done.stdout
    assert "perf_analyzer 60" in done.stdout
    alive = subprocess.run(["pgrep", "-f", "^perf_analyzer 60$"], capture_output=True,
                           text=True, check=False)
    assert alive.stdout.strip() == ""


def test_only_a_process_left_to_init_is_an_orphan():
    # pid -> parent: 10 is the test run (older than the notebook), 20 its kernel, 21
    # the kernel's server; 30 is a server whose kernel died (handed to init); 40 came
    # in from outside the pid namespace (parent 0), 41 is its child; 50 is an old one.
    parents = {1: 0, 10: 1, 20: 10, 21: 20, 30: 1, 31: 30, 40: 0, 41: 40, 50: 1}
    assert sorted(leftovers.orphaned(parents, {1, 10, 50})) == [30, 31]


def test_a_process_is_known_by_the_program_it_runs():
    renamed = subprocess.Popen(["bash", "-c", "exec -a perf_analyzer sleep 30"])
    module = subprocess.Popen(
        [sys.executable, "-m", "timeit", "-n", "1", "import time; time.sleep(30)"]
    )
    # A command line that names a book program as an argument runs something else.
    mention = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "tritonserver"]
    )
    try:
        time.sleep(0.5)
        assert leftovers.program(renamed.pid) == "perf_analyzer"
        assert leftovers.program(module.pid) == "timeit"
        assert "tritonserver" in Path(f"/proc/{mention.pid}/cmdline").read_text()
        assert leftovers.program(mention.pid) not in leftovers.BOOK_PROCESSES
    finally:
        for child in (renamed, module, mention):
            child.kill()
            child.wait()
