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
