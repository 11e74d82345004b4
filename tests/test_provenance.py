"""The committed outputs say where they came from, and came from the committed code in
the full profile (issue 52); the prose's measured claims hold in those outputs."""

import json
from pathlib import Path

import nbformat
import pytest

from booktools import claims, execute

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = [*sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ROOT / "book" / "workshop.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_come_from_a_full_run_of_the_committed_code(path):
    notebook = nbformat.read(path, as_version=4)
    made = notebook.metadata.get("tritonbook", {}).get("provenance")
    assert made, f"{path.name}: no provenance; run python -m booktools.execute {path.relative_to(ROOT)}"
    assert made["profile"] == "full", f"{path.name}: its outputs came from a {made['profile']} run"
    assert made["code_hash"] == execute.code_hash(notebook), (
        f"{path.name}: its code cells changed since the run that made its outputs")
    assert notebook.metadata["tritonbook"]["succeeded"] is True


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_measured_claim_of_the_prose_holds_in_the_committed_outputs(path):
    assert claims.problems(path) == []


def test_the_claims_are_read_and_checked():
    cells = [nbformat.v4.new_markdown_cell(
                 "Text.\n<!-- claim: a / b, time => higher -->\n"
                 "<!-- claim: c / d => higher | no verdict -->\n"
                 "<!-- claim: fixed / small < 0.1 -->\n<!-- claim: gone > 1 -->"),
             nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
                 "stream", name="stdout",
                 text="a / b, time: 1.50x (95 % interval 1.2-1.8, 5 + 5 runs): higher\n"
                      "  c / d: 0.9x (95 % interval nan-nan): not enough runs for a verdict\n"
                      "fixed / small: 0.04\n")])]
    notebook = json.loads(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))
    found = claims.claims(notebook)
    assert [(c.label, c.op, c.value) for c in found] == [
        ("a / b, time", "=>", "higher"), ("c / d", "=>", "higher | no verdict"),
        ("fixed / small", "<", "0.1"), ("gone", ">", "1")]
    lines = claims.printed_lines(notebook)
    results = [claims.check(c, lines) for c in found]
    assert results[0] is None and results[2] is None
    assert "not enough runs" in results[1] and "no printed line" in results[3]


def test_a_claim_reads_the_line_printed_above_it(tmp_path):
    # The prose speaks of the result above it; a later cell printing the same label
    # (chapter 14's GPU record) does not count, and a claim with no such line above it
    # reads the whole notebook.
    def printed(text):
        return nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
            "stream", name="stdout", text=text)])

    cells = [printed("fixed / small: 0.04\n"),
             nbformat.v4.new_markdown_cell("<!-- claim: fixed / small < 0.1 -->\n"
                                           "<!-- claim: later / one < 0.1 -->"),
             printed("fixed / small: 0.5\nlater / one: 0.05\n")]
    path = tmp_path / "claims.ipynb"
    path.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))
    assert claims.problems(path, entries=[]) == []
    cells[0] = printed("fixed / small: 0.5\n")
    path.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))
    assert claims.problems(path, entries=[]) == [
        "cell 1: fixed / small < 0.1: the run printed 'fixed / small: 0.5'"]


def test_a_run_records_its_provenance(tmp_path, monkeypatch):
    path = tmp_path / "tiny.ipynb"
    source = "from tritonbook.profile import rounds\nprint(rounds(5))"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    monkeypatch.setenv("TRITONBOOK_PROFILE", "quick")
    execute.execute(path)
    notebook = nbformat.read(path, as_version=4)
    made = notebook.metadata["tritonbook"]["provenance"]
    assert made["profile"] == "quick" and made["code_hash"] == execute.code_hash(notebook)
    assert list(made["modules"]) == ["profile"] and set(made["cell_seconds"]) == {"0"}
    assert made["cores"] >= 1 and made["torch"] and made["commit"]
    assert notebook.cells[0].outputs[0]["text"] == "1\n"  # the quick profile's rounds
