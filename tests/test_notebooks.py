"""The notebook runner behind `make book`: outputs and run metadata written back."""

import json
from pathlib import Path

import nbformat
import pytest

from booktools import execute as notebooks


def _notebook(path, *sources):
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)


def test_run_is_stored_with_its_metadata_and_progress_bars_collapsed(tmp_path):
    path = tmp_path / "progress.ipynb"
    _notebook(path, "import sys\nfor i in range(3):\n    sys.stderr.write(f'\\rstep {i}')\nsys.stderr.write('\\n')\nprint('done')")
    seconds = notebooks.execute(path)
    notebook = nbformat.read(path, as_version=4)
    run = notebook.metadata["tritonbook"]
    assert run["succeeded"] is True and run["run_seconds"] == round(seconds, 1) and run["executed"]
    streams = {o.name: o.text for o in notebook.cells[0].outputs if o.output_type == "stream"}
    assert streams == {"stderr": "step 2\n", "stdout": "done\n"}
    assert "execution" not in notebook.cells[0].metadata  # no per-cell timestamps


def test_failed_run_is_stored_as_failed(tmp_path):
    path = tmp_path / "fails.ipynb"
    _notebook(path, "raise ValueError('on purpose')")
    with pytest.raises(Exception, match="on purpose"):
        notebooks.execute(path)
    assert nbformat.read(path, as_version=4).metadata["tritonbook"]["succeeded"] is False
    assert notebooks.main([str(path)]) == 1


def test_make_test_remote_runs_every_notebook_that_reaches_a_server():
    # test-remote picks its notebooks by the call that connects them to Triton; a notebook
    # that reached a server some other way would silently miss the remote run.
    import re
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    listed = subprocess.run(["make", "-s", "-C", str(root), "--eval", "show:;@echo $(SERVER_NOTEBOOKS)", "show"],
                            capture_output=True, text=True, check=True).stdout.split()
    reaches = re.compile(r"server\.(start|remote_from_environment|EmbeddedTriton)\(|TRITON_URL")

    def code(path):  # the code cells only: the prose may name TRITON_URL
        return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")

    using = sorted(str(p.relative_to(root)) for p in [*root.glob("notebooks/*.ipynb"), root / "book/workshop.ipynb"]
                   if reaches.search(code(p)))
    assert sorted(listed) == using
    assert {"notebooks/00_environment.ipynb", "notebooks/06_pipelines.ipynb"} <= set(listed)


CHAPTERS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_ends_with_its_corrections_of_the_sources(chapter):
    # Issue 15: every chapter closes with a "Where the source is wrong" box that says what
    # the source said, what holds, and the evidence; at least one entry in bold.
    cells = json.loads(chapter.read_text())["cells"]
    last = "".join(cells[-1]["source"])
    assert cells[-1]["cell_type"] == "markdown"
    assert last.startswith("```{admonition} Where the source is wrong"), last[:80]
    assert last.rstrip().endswith("```") and "- **" in last


def test_the_run_stores_its_cpu_time_peak_memory_and_slowest_cells(tmp_path):
    # What a hub is sized from: a child that holds 300 MiB and burns CPU must show in the
    # peak memory and the CPU time, and the cell that sleeps longest comes first.
    path = tmp_path / "cost.ipynb"
    child = ("import subprocess, sys\n"
             "code = 'import time\\nblock = bytearray(300 * 2**20)\\nend = time.time() + 1.5\\n"
             "while time.time() < end: pass'\n"
             "subprocess.run([sys.executable, '-c', code], check=True)")
    _notebook(path, "import time\ntime.sleep(0.2)", child, "time.sleep(2.5)")
    notebooks.execute(path)
    run = nbformat.read(path, as_version=4).metadata["tritonbook"]
    assert run["peak_memory_gib"] >= 300 / 1024
    assert run["cpu_seconds"] >= 1.0  # the child's busy loop, once the kernel has waited for it
    assert [entry["cell"] for entry in run["slowest_cells"]] == [2, 1, 0]
    assert run["slowest_cells"][0]["seconds"] >= 2.5


def test_the_tree_of_processes_is_found_from_proc():
    import os
    import subprocess
    import sys

    script = ("import subprocess, sys; "
              "subprocess.run([sys.executable, '-c', 'import time; time.sleep(5)'])")
    outer = subprocess.Popen([sys.executable, "-c", script])
    try:
        for _ in range(50):
            below = notebooks.descendants(os.getpid())
            if len(below) >= 2:
                break
            import time
            time.sleep(0.1)
        assert outer.pid in below and len(below) >= 2  # the child and its grandchild
        assert notebooks.pss_bytes(outer.pid) > 0 and notebooks.pss_bytes(2**22 + 7) == 0
    finally:
        outer.kill()
        outer.wait()


# The runner's options for CI's first pass and the GPU run (issue 53) ------------------


def test_keep_going_records_each_failing_cell_and_runs_the_rest(tmp_path):
    path, out = tmp_path / "fails.ipynb", tmp_path / "out" / "fails.ipynb"
    _notebook(path, "print('before')", "raise ValueError('on purpose')", "print('after')")
    notebooks.execute(path, out=out, keep_going=True)
    copy = nbformat.read(out, as_version=4)
    run = copy.metadata["tritonbook"]
    assert run["failed_cells"] == [{"cell": 1, "error": "ValueError: on purpose"}]
    assert run["succeeded"] is False and copy.cells[2].outputs[0].text == "after\n"
    assert nbformat.read(path, as_version=4).cells[0].outputs == []  # the original untouched


def test_a_budget_stops_the_notebook_and_says_where(tmp_path):
    path = tmp_path / "slow.ipynb"
    _notebook(path, "print('quick')", "import time\ntime.sleep(30)", "print('never')")
    seconds = notebooks.execute(path, keep_going=True, budget_s=4)
    notebook = nbformat.read(path, as_version=4)
    assert seconds < 20
    assert notebook.metadata["tritonbook"]["stopped"] == "stopped in cell 1 at its budget of 4 s"
    assert notebook.cells[2].outputs == []  # nothing stale where the run never went


def test_the_profile_reaches_the_kernel_and_the_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONBOOK_PROFILE", "full")
    path = tmp_path / "profile.ipynb"
    _notebook(path, "import os\nprint(os.environ['TRITONBOOK_PROFILE'])")
    notebooks.execute(path, profile="quick", jobs=3)
    notebook = nbformat.read(path, as_version=4)
    made = notebook.metadata["tritonbook"]["provenance"]
    assert notebook.cells[0].outputs[0].text == "quick\n"
    assert made["profile"] == "quick" and made["jobs"] == 3
    assert made["device"].startswith("device: ")


def test_the_check_pass_compares_checked_outputs_and_budgets(tmp_path, monkeypatch, capsys):
    from booktools import budget

    path = tmp_path / "checked.ipynb"
    _notebook(path, "# NBVAL_CHECK_OUTPUT\nprint(2 + 2)", "# NBVAL_CHECK_OUTPUT\nprint('127.0.0.1:8000')",
              "print('not checked')")
    notebook = nbformat.read(path, as_version=4)
    # As committed: a wrong sum, another port (sanitised away), an unchecked difference.
    outputs = ["5\n", "127.0.0.1:41234\n", "anything\n"]
    for cell, text in zip(notebook.cells, outputs):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    nbformat.write(notebook, path)
    budgets = tmp_path / "budgets.json"
    budgets.write_text(json.dumps({"embedded": {notebooks._relative(path): 60}}))
    monkeypatch.setattr(budget, "BUDGETS", budgets)
    monkeypatch.delenv("TRITON_URL", raising=False)
    assert notebooks.main(["--check", "--out", str(tmp_path / "out"), str(path)]) == 1
    printed = capsys.readouterr()
    assert "cell 0: its outputs differ from the committed ones" in printed.out
    assert "cell 1: its" not in printed.out and "cell 2: its" not in printed.out
    assert "of 60 s" in printed.out and "FAILED: " in printed.err


def test_jobs_run_apart_and_pack_one_archive(tmp_path):
    import tarfile

    paths = [tmp_path / f"{name}.ipynb" for name in ("one", "two")]
    _notebook(paths[0], "print(1)")
    _notebook(paths[1], "raise RuntimeError('on the GPU only')")
    out, packed = tmp_path / "out", tmp_path / "book-gpu.tar.gz"
    code = notebooks.main(["--jobs", "2", "--keep-going", "--out", str(out),
                           "--archive", str(packed), *map(str, paths)])
    assert code == 1  # a failing cell fails the run, after the archive is made
    with tarfile.open(packed) as tar:
        names = tar.getnames()
        summary = json.load(tar.extractfile("gpu_run.json"))
    assert "gpu_run.json" in names and len(names) == 3
    rows = {Path(name).name: row for name, row in summary.items()}
    assert rows["one.ipynb"]["succeeded"] is True and rows["one.ipynb"]["provenance"]["jobs"] == 2
    assert rows["two.ipynb"]["failed_cells"][0]["error"] == "RuntimeError: on the GPU only"


def test_the_gpu_plan_covers_every_chapter_within_one_call():
    # make book-gpu runs the plan GPU_JOBS at a time, longest first: with every notebook
    # stopped at its budget, the call still ends within 300 s (a device call may run
    # 6 minutes, and unpacking the bundle comes first).
    import subprocess

    root = Path(__file__).resolve().parents[1]

    def make(variable):
        return subprocess.run(["make", "-s", "-C", str(root), "--eval", f"show:;@echo $({variable})",
                               "show"], capture_output=True, text=True, check=True).stdout.split()

    steps = notebooks.plan("gpu")
    assert sorted(steps) == sorted(make("GPU_NOTEBOOKS"))
    assert {step["profile"] for step in steps.values()} <= {"full", "quick"}
    lanes = [0.0] * int(make("GPU_JOBS")[0])
    for seconds in sorted((step["seconds"] for step in steps.values()), reverse=True):
        lanes[lanes.index(min(lanes))] += seconds
    assert max(lanes) <= 300, lanes
