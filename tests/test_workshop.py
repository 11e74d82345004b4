"""Workshop schedules: built from the committed notebooks, and refused when they do not fit."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from booktools import workshop


@pytest.fixture(scope="module")
def book():
    return workshop.chapters()


def test_every_chapter_has_a_run_time_and_exercises(book):
    assert list(book) == sorted(book) and "00_environment" in book
    for name, chapter in book.items():
        assert chapter.run_seconds > 0, name
        if name != "00_environment":
            assert 2 <= chapter.exercises <= 3, name


def test_slot_is_the_stated_teaching_rate_applied(book):
    chapter = book["05_model_repository"]
    work = (chapter.words / workshop.WORDS_PER_MINUTE
            + workshop.RUN_FACTOR * chapter.run_seconds / 60
            + chapter.exercises * workshop.MINUTES_PER_EXERCISE)
    expected = work * (1 + workshop.QUESTIONS_SHARE)
    assert chapter.slot_minutes() % 5 == 0
    assert expected <= chapter.slot_minutes() < expected + 5
    assert chapter.slot_minutes(1) < chapter.slot_minutes()


def test_committed_plans_fit_their_days(book):
    half = workshop.schedule(workshop.HALF_DAY, book, day_minutes=240)
    full = workshop.schedule(workshop.FULL_DAY, book, day_minutes=480)
    assert half["minutes"].sum() <= 240 and full["minutes"].sum() <= 480
    assert half.index[0] == "09:00" and half.iloc[-1]["what"] == "End"
    # The full day leaves chapter 4 (read at home), chapters 7 and 9-14 (a second morning)
    # and chapter 8 (after the day) out, as the workshop guide says.
    planned = {name for kind, name, _ in workshop.FULL_DAY if kind == "chapter"}
    assert set(book) - planned == {"04_dynamic_onnx_resize", "07_production", "08_model_navigator",
                                   "09_clients", "10_requests_and_state", "11_half_precision",
                                   "12_host_memory", "13_measuring_served_models", "14_cpu_tuning"}
    assert sum("exercises" in what for what in full["what"]) == len(planned) - 1


def test_every_chapter_slot_states_its_objective(book):
    assert set(workshop.OBJECTIVES) == set(book)
    full = workshop.schedule(workshop.FULL_DAY, book, day_minutes=480)
    for what, objective in zip(full["what"], full["objective"]):
        is_chapter = what[0].isdigit() or what == "Environment check"
        assert bool(objective) == is_chapter, what


def test_plan_too_long_is_refused(book):
    with pytest.raises(workshop.ScheduleError, match="more than the day's 60"):
        workshop.schedule(workshop.FULL_DAY, book, day_minutes=60)


def test_unknown_chapter_is_refused(book):
    with pytest.raises(workshop.ScheduleError, match="no chapter notebook '07_missing'"):
        workshop.schedule([("chapter", "07_missing", None)], book)


def test_notebook_without_run_time_is_refused(tmp_path):
    import nbformat

    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 9. Draft")]),
                   tmp_path / "09_draft.ipynb")
    with pytest.raises(workshop.ScheduleError, match="09_draft.ipynb has no stored run time"):
        workshop.chapters(tmp_path)


def _chapter(name, run, cpu, peak):
    return workshop.Chapter(notebook=name, title=name, run_seconds=run, words=100,
                            exercises=2, cpu_seconds=cpu, peak_memory_gib=peak,
                            slowest_cells=(("1. A section", run / 2),))


def test_hub_size_is_the_stated_rule_applied():
    book = {"a": _chapter("a", 100, 150, 2.0), "b": _chapter("b", 100, 50, 3.0)}
    # The costliest chapter in cores (a: 1.5) and in memory (b: 3 GiB), for 10 students.
    assert workshop.hub_size(book, 10) == {
        "students": 10, "cores": 15, "memory (GiB)": 30 + workshop.HUB_SYSTEM_GIB}
    assert workshop.hub_size(book, 10, ["b"])["cores"] == 5
    with pytest.raises(ValueError, match="at least 1"):
        workshop.hub_size(book, 0)
    book["c"] = workshop.Chapter("c", "c", 10.0, 1, 0)  # no stored costs
    with pytest.raises(workshop.ScheduleError, match="c: run `make book`"):
        workshop.hub_size(book, 1)


def test_every_chapter_stores_what_its_run_cost(book):
    costs = workshop.cost_table(book)
    assert list(costs.index) == list(book)
    for name, row in costs.iterrows():
        assert 0 < row["peak memory (GiB)"] < 24, name  # this machine's memory
        # A run keeps at most this machine's 2 cores busy (and some margin).
        assert 0 < row["cores busy (CPU / run time)"] <= 2.2, name
        assert row["slowest cell (s)"] <= row["run time (s)"], name
        assert row["slowest cell is under"], name


def test_a_slow_cell_is_named_by_the_heading_above_it(tmp_path):
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Title\n\n## 1. First part\n\ntext"),
        nbformat.v4.new_code_cell("1"),
        nbformat.v4.new_markdown_cell("### Exercise 1.1\n\ntext"),
        nbformat.v4.new_code_cell("2")])
    notebook.metadata["tritonbook"] = {
        "run_seconds": 10, "cpu_seconds": 12, "peak_memory_gib": 1.0,
        "slowest_cells": [{"cell": 3, "seconds": 6.0}, {"cell": 1, "seconds": 3.0}]}
    nbformat.write(notebook, tmp_path / "01_x.ipynb")
    chapter = workshop.read_chapter(tmp_path / "01_x.ipynb")
    assert chapter.slowest_cells == (("Exercise 1.1", 6.0), ("1. First part", 3.0))


def _servers_below(pid: int) -> dict[int, str]:
    """The tritonserver processes started below ``pid``: pid -> command line. Other tests
    may run servers at the same time; only these are the students'."""
    from booktools.execute import descendants

    found = {}
    for child in descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone since the scan
        if command.split(" ", 1)[0].endswith("/tritonserver"):
            found[child] = command
    return found


def test_two_students_on_one_host_do_not_collide():
    """Two students run chapter 0 at the same time from one clone, as a class on one
    hub does (the same models, the same files, the same moment): each run starts its
    own embedded server (ports, /dev/shm prefix), both pass nbval, and neither leaves a
    server or a shared-memory region behind."""
    root = Path(__file__).resolve().parent.parent
    nbval = subprocess.run(["make", "-s", "-C", str(root), "--eval", "show:;@echo $(NBVAL)", "show"],
                           capture_output=True, text=True, check=True).stdout.split()
    students = [subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", notebook, *nbval],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for notebook in ["notebooks/00_environment.ipynb"] * 2]
    seen: dict[int, str] = {}
    together = []  # (student A's servers, student B's) at moments both had one
    while any(s.poll() is None for s in students):
        running = [_servers_below(s.pid) for s in students]
        for servers in running:
            seen.update(servers)
        if all(running):
            together.append(running)
        time.sleep(0.2)
    for student in students:
        assert student.returncode == 0, student.stdout.read()[-3000:]
    # The students' servers ran at once (a chapter may start more than one in turn),
    # and two that ran at once never shared a port or a shared-memory prefix.
    assert together, seen

    def port_and_prefix(command):
        return (re.search(r"--http-port=(\d+)", command).group(1),
                re.search(r"shm-region-prefix-name=(\S+)", command).group(1))

    for first, second in together:
        mine = {port_and_prefix(c) for c in first.values()}
        theirs = {port_and_prefix(c) for c in second.values()}
        assert not {p for p, _ in mine} & {p for p, _ in theirs}
        assert not {x for _, x in mine} & {x for _, x in theirs}
    prefixes = {port_and_prefix(c)[1] for c in seen.values()}
    # Neither server outlived its student, nor did a region of theirs.
    assert not [pid for pid in seen if Path(f"/proc/{pid}").exists()]
    assert not [name for name in os.listdir("/dev/shm") for prefix in prefixes if name.startswith(prefix)]


def test_the_workshop_page_shows_the_chapters_as_committed(book):
    """book/workshop.ipynb's run table is read from the chapters: re-execute it
    after a chapter (its run time, its words), or nbval fails it in CI."""
    import json

    notebook = Path(__file__).resolve().parents[1] / "book" / "workshop.ipynb"
    page = json.loads(notebook.read_text())
    first = next(c for c in page["cells"] if c["cell_type"] == "code")
    shown = "".join(first["outputs"][0]["data"]["text/html"])
    assert shown == workshop.run_table(book)._repr_html_(), (
        "re-execute book/workshop.ipynb: a chapter changed since"
    )
