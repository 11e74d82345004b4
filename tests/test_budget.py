"""Each notebook's CI time beside its budget (booktools.budget, issue 52)."""

import subprocess
import sys
from pathlib import Path

import nbformat

from booktools import budget

ROOT = Path(__file__).resolve().parents[1]


def _make(variable: str) -> list[str]:
    return subprocess.run(["make", "-s", "-C", str(ROOT), "--eval", f"show:;@echo $({variable})",
                           "show"], capture_output=True, text=True, check=True).stdout.split()


def test_every_notebook_of_each_pass_has_a_budget():
    assert sorted(budget.budgets("embedded")) == sorted(_make("NOTEBOOKS"))
    assert sorted(budget.budgets("remote")) == sorted(_make("SERVER_NOTEBOOKS"))


def test_a_notebook_over_one_and_a_half_times_its_budget_fails():
    rows = dict(budget.verdicts({"a": 90.0, "b": 120.0, "c": 160.0, "d": 5.0},
                                {"a": 100, "b": 100, "c": 100}))
    assert "over" not in rows["a"] and "FAILED" not in rows["a"]
    assert rows["b"].endswith("over its budget")
    assert "FAILED, over 1.5 times its budget" in rows["c"]
    assert "no budget: FAILED" in rows["d"]


def test_the_plugin_prints_the_times_and_fails_the_run(tmp_path, monkeypatch):
    # A notebook that sleeps past 1.5 times a budget of one second, with the budgets of
    # a file written for the test.
    path = tmp_path / "slow.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import time\ntime.sleep(2)")]), path)
    budgets = tmp_path / "budgets.json"
    script = (
        "import json, sys, pathlib, pytest\n"
        "from booktools import budget\n"
        f"budget.BUDGETS = pathlib.Path({str(budgets)!r})\n"
        "name = budget._notebook(type('I', (), {'path': pathlib.Path(sys.argv[1])})())\n"
        "budget.BUDGETS.write_text(json.dumps({'embedded': {name: 1}}))\n"
        "sys.exit(pytest.main([sys.argv[1], '--nbval-lax', '--nbval-current-env',\n"
        "                      '-p', 'no:cacheprovider', '-q'], plugins=[budget]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "1 passed" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("FAILED: notebook time over budget")
