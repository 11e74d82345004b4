"""The record of full runs, and the prose's directions held to it (issue 54)."""

import json

import pytest

from booktools import claims, record

LINE = "{}: {}x (95 % interval {}-{}, 6 paired rounds, order alternating): {}"


def notebook(lines, source="print(ratio)", succeeded=True, profile="full",
             executed="2026-12-01T10:00:00+00:00", prose=""):
    return {"cells": [
        {"cell_type": "markdown", "source": [prose], "metadata": {}},
        {"cell_type": "code", "source": [source], "metadata": {}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": ["\n".join(lines) + "\n"]}]}],
        "metadata": {"tritonbook": {"executed": executed, "succeeded": succeeded,
                                    "provenance": {"profile": profile, "commit": "abc",
                                                   "cpu": "EPYC", "cores": 2,
                                                   "device": "cpu"}}}}


def test_a_verdict_line_is_read_even_when_its_label_holds_a_colon():
    lines = ["warm-up done", LINE.format("1 face: shared memory / gRPC", 0.8, 0.7, 0.9, "lower")]
    [found] = record.verdicts(notebook(lines))
    assert found["name"] == "1 face: shared memory / gRPC" and found["verdict"] == "lower"
    assert (found["ratio"], found["low"], found["high"], found["rounds"]) == (0.8, 0.7, 0.9, 6)
    assert found["cell"] == record.cell_hash("print(ratio)")


def test_a_label_printed_twice_is_refused():
    lines = [LINE.format("a / b", 1.5, 1.2, 1.8, "higher")] * 2
    with pytest.raises(ValueError, match="printed twice"):
        record.verdicts(notebook(lines))


def test_only_a_full_run_that_succeeded_is_recorded(tmp_path):
    file = tmp_path / "runs.jsonl"
    lines = [LINE.format("a / b", 1.5, 1.2, 1.8, "higher")]
    assert record.append("notebooks/07_production.ipynb", notebook(lines, profile="quick"), file) == 0
    assert record.append("notebooks/07_production.ipynb", notebook(lines, succeeded=False), file) == 0
    assert not file.exists()
    assert record.append("notebooks/07_production.ipynb", notebook(lines), file) == 1
    assert record.append("notebooks/07_production.ipynb", notebook(lines), file) == 1
    [first, second] = record.read(file)
    assert first == second and first["notebook"] == "07_production" and first["commit"] == "abc"


def _entry(started, verdict, cell="c1", ratio=1.5):
    return {"name": "a / b", "cell": cell, "verdict": verdict, "ratio": ratio,
            "started": f"2026-12-{started}:00+00:00"}


def test_runs_of_one_session_count_once_and_a_changed_cell_starts_afresh():
    entries = [_entry("01T10:00", "higher"), _entry("01T11:30", "lower", ratio=0.8),
               _entry("01T14:00", "higher"), _entry("02T09:00", "higher"),
               _entry("03T09:00", "higher", cell="c2")]
    # 10:00 and 11:30 are one sitting (its last run counts): lower, higher, higher.
    assert record.tally("a / b", "c1", entries) == {"lower": 1, "higher": 2}
    assert record.seen_range("a / b", "c1", entries) == (0.8, 1.5)
    assert record.tally("a / b", "c2", entries) == {"higher": 1}


def test_a_verdict_moved_unchanged_to_another_chapter_keeps_its_history():
    # Chapter 5's measurements moved to chapter 13 (issue 56): the same label and cell.
    entries = [{**_entry(day, "higher"), "notebook": "05_model_repository"}
               for day in ("01T10:00", "02T10:00", "03T10:00")]
    shown = record.table(entries, {("13_measuring_served_models", "a / b"): {"cell": "c1"}})
    assert "| 13 | a / b | 3 | higher 3 | 1.50x | replicates: higher |" in shown
    changed = record.table(entries, {("13_measuring_served_models", "a / b"): {"cell": "c2"}})
    assert "| 13 | a / b | 0 |" in changed


def test_a_direction_needs_three_agreeing_runs_and_none_against():
    assert record.supported("higher", record.Counter(higher=3))
    assert not record.supported("higher", record.Counter(higher=2))
    assert not record.supported("higher", record.Counter(higher=5, lower=1))
    assert record.supported("lower", record.Counter(lower=3, **{"not shown beyond 10%": 2}))


def test_the_prose_states_a_direction_only_where_the_record_replicates_it(tmp_path):
    lines = [LINE.format("a / b", 1.5, 1.2, 1.8, "higher")]
    committed = notebook(lines, prose="<!-- claim: a / b => higher -->")
    path = tmp_path / "07_production.ipynb"
    path.write_text(json.dumps(committed))
    cell = record.cell_hash("print(ratio)")
    runs = [{**_entry(day, "higher"), "cell": cell} for day in ("01T10:00", "02T10:00")]
    [problem] = claims.problems(path, runs)
    assert "{'higher': 2}" in problem and "needs 3" in problem
    runs.append({**_entry("03T10:00", "higher"), "cell": cell})
    assert claims.problems(path, runs) == []
    # "varies" holds until a direction replicates.
    path.write_text(json.dumps(notebook(lines, prose="<!-- claim: a / b => varies -->")))
    assert "now replicates 'higher'" in claims.problems(path, runs)[0]
    assert claims.problems(path, runs[:2]) == []


def test_a_copy_outside_the_book_is_not_recorded(tmp_path):
    file = tmp_path / "runs.jsonl"
    lines = [LINE.format("a / b", 1.5, 1.2, 1.8, "higher")]
    assert record.append(tmp_path / "07_production.ipynb", notebook(lines), file) == 0


def test_an_effect_of_the_history_holds_while_no_run_of_the_record_contradicts_it(tmp_path):
    name = "first request, no warm-up / warm-up"
    lines = [LINE.format(name, 2.0, 1.6, 2.5, "higher")]
    path = tmp_path / "07_production.ipynb"
    path.write_text(json.dumps(notebook(lines, prose=f"<!-- claim: {name} => higher (history) -->")))
    cell = record.cell_hash("print(ratio)")
    assert claims.problems(path, []) == []
    against = [{**_entry("01T10:00", "lower"), "name": name, "cell": cell}]
    assert "gave the opposite" in claims.problems(path, against)[0]
    # The run itself must give it too.
    path.write_text(json.dumps(notebook([LINE.format(name, 1.0, 0.8, 1.2, "not shown beyond 10%")],
                                        prose=f"<!-- claim: {name} => higher (history) -->")))
    assert "the run printed" in claims.problems(path, [])[0]
    # Only the effects the history carried may be claimed that way.
    lines = [LINE.format("a / b", 1.5, 1.2, 1.8, "higher")]
    path.write_text(json.dumps(notebook(lines, prose="<!-- claim: a / b => higher (history) -->")))
    assert "not one of the effects" in claims.problems(path, [])[0]


def test_the_replication_page_shows_the_committed_record():
    text = record.PAGE.read_text()
    shown = text.split(record.TABLE_START, 1)[1].split(record.TABLE_END, 1)[0].strip()
    assert shown == record.table(record.read(), record.committed_verdicts()), (
        "run python -m booktools.record to write the record's table into book/replication.md")


def test_every_committed_notebook_prints_each_verdict_label_once():
    # record.verdicts refuses a label printed twice: the record names a verdict by it.
    assert len(record.committed_verdicts()) >= 20


def test_the_status_of_a_verdict_follows_its_runs():
    assert record.status(record.Counter(higher=3)) == "replicates: higher"
    assert record.status(record.Counter(higher=1)) == "higher in 1 of the 3 agreeing runs a direction needs"
    assert record.status(record.Counter({"not shown beyond 10%": 2})) == "no direction in 2 run(s)"
    assert record.status(record.Counter(higher=2, lower=1)) == "varies: both directions seen"
