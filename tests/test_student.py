"""Student copies: no solution and no output left, and a copy that runs up to its first
exercise against a real server."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from booktools import student
from booktools.execute import _current_env_kernel_manager

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def hidden_lines(solution: str) -> set[str]:
    """The lines of a solution that its stub must not show: all but blanks, comments and
    the asserts that grade it (kept on purpose)."""
    kept = set(student.exercise_stub(solution).splitlines())
    return {line for line in solution.splitlines()
            if line.strip() and not line.strip().startswith("#") and line not in kept}


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    out = tmp_path_factory.mktemp("workshop")
    assert student.main([*map(str, CHAPTERS), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_a_student_copy_has_stubs_and_checks_but_no_solution_or_output(copies, chapter):
    original = nbformat.read(chapter, as_version=4)
    copy = nbformat.read(copies / chapter.name, as_version=4)
    exercises = sum(c.cell_type == "markdown" and c.source.startswith("### Exercise") for c in original.cells)
    stubs = [c for c in copy.cells if c.cell_type == "code" and c.source.startswith(student.STUB)]
    assert len(stubs) == exercises
    groups = student.solutions(original.cells)
    # Each solution, however many cells it spans, becomes its first cell's stub.
    dropped = {i for group in groups for i in group[1:]}
    kept = [c for i, c in enumerate(original.cells) if i not in dropped]
    assert len(copy.cells) == len(kept)
    for before, after in zip(kept, copy.cells):
        if after.cell_type == "code":
            assert after.outputs == [] and after.execution_count is None
            assert "execution" not in after.metadata and "tags" not in after.metadata
        if not student.is_solution(before):
            assert after.source == before.source  # the lesson itself is untouched
    for group, stub in zip(groups, stubs):
        solution = "\n\n".join(original.cells[i].source for i in group)
        # No line of the solution is shown, but the asserts that grade it.
        assert not hidden_lines(solution) & set(stub.source.splitlines()), chapter.name
        for line in solution.splitlines():
            if line.startswith("assert "):
                assert line in stub.source.splitlines()
    assert "tritonbook" not in copy.metadata


def test_a_solution_in_cells_in_a_row_is_one_exercise():
    cells = [nbformat.v4.new_markdown_cell("### Exercise 1"),
             *[nbformat.v4.new_code_cell(f"x{i} = {i}\nassert x{i} == {i}", metadata={"tags": ["hide-cell"]})
               for i in range(3)],
             nbformat.v4.new_markdown_cell("### Exercise 2"),
             nbformat.v4.new_code_cell("y = 1\nassert y", metadata={"tags": ["hide-cell"]})]
    assert student.solutions(cells) == [[1, 2, 3], [5]]


def test_the_stub_keeps_multi_line_asserts():
    solution = "x = 1\nassert x == (\n    1\n)\nprint(x)\n"
    assert student.exercise_stub(solution).splitlines()[-3:] == ["assert x == (", "    1", ")"]


def test_a_student_copy_runs_up_to_its_first_exercise(copies, tmp_path):
    from nbclient import NotebookClient

    # Chapter 4 is the quickest chapter with a server and exercises.
    copy = nbformat.read(copies / "04_dynamic_onnx_resize.ipynb", as_version=4)
    first = next(i for i, c in enumerate(copy.cells) if c.cell_type == "code" and c.source.startswith(student.STUB))
    copy.cells = copy.cells[:first]
    # The chapter stops its server in its last cell, which comes after the exercises.
    copy.cells.append(nbformat.v4.new_code_cell("if 'triton' in globals():\n    triton.stop()"))
    client = NotebookClient(copy, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.kernel_manager_class = _current_env_kernel_manager()
    client.execute()
    errors = [o for c in copy.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
