"""The notebooks as a reader meets them on the rendered page."""

import json
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + [ROOT / "book" / "workshop.ipynb"]
# One number for the formatter and this test: the characters a code cell shows without
# scrolling sideways (the browser check measures the same at the book's width).
LINE_LENGTH = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]


def long_lines(notebook: Path, limit: int) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return [f"cell {index}, {len(line)} characters: {line.strip()[:60]}"
            for index, cell in enumerate(cells) if cell["cell_type"] == "code"
            for line in "".join(cell["source"]).splitlines() if len(line) > limit]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_code_fits_the_page(notebook):
    too_long = long_lines(notebook, LINE_LENGTH)
    assert not too_long, (f"{len(too_long)} code line(s) over {LINE_LENGTH} characters "
                          f"(`ruff format` wraps code; strings and comments by hand):\n"
                          + "\n".join(too_long))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_no_cell_carries_execution_timestamps(notebook):
    # Timestamps change on every run and bury the real changes in a diff; the
    # notebook's run time is in its metadata (booktools.execute).
    cells = json.loads(notebook.read_text())["cells"]
    stamped = [index for index, cell in enumerate(cells) if "execution" in cell["metadata"]]
    assert not stamped, f"cells with execution timestamps: {stamped}"


def test_a_long_line_is_found(tmp_path):
    notebook = tmp_path / "wide.ipynb"
    cell = {"cell_type": "code", "source": ["short = 1\n", "x = " + "1 + " * 30 + "1"]}
    notebook.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["y" * 200]},
                                              cell]}))
    [found] = long_lines(notebook, LINE_LENGTH)
    assert found.startswith("cell 1, 125 characters")


# A cell a reader takes in at a glance: define, run or show one thing. The anchors
# (d2l-en, QuantEcon) sit near 6-7 lines a code cell; these limits hold the chapters
# near there and fail a cell that a reader would have to scroll through. Longer than
# CELL_LINES: only an import cell may be, up to IMPORT_CELL_LINES.
MEDIAN_CELL_LINES = 11
CELL_LINES = 32
IMPORT_CELL_LINES = 36


def code_cell_lines(notebook: Path) -> list[tuple[int, int, bool]]:
    """(cell index, lines, whether the cell only imports and sets up) per code cell."""
    cells = json.loads(notebook.read_text())["cells"]
    code = [(index, "".join(cell["source"]).splitlines()) for index, cell in enumerate(cells)
            if cell["cell_type"] == "code"]
    return [(index, len(lines), order == 0 and any(line.startswith(("import ", "from "))
                                                   for line in lines))
            for order, (index, lines) in enumerate(code)]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_cells_are_short(notebook):
    import statistics

    rows = code_cell_lines(notebook)
    median = statistics.median(lines for _, lines, _ in rows)
    assert median <= MEDIAN_CELL_LINES, f"median code cell {median} lines"
    too_long = [f"cell {index}: {lines} lines" for index, lines, imports in rows
                if lines > (IMPORT_CELL_LINES if imports else CELL_LINES)]
    assert not too_long, "split these into define, run and show:\n" + "\n".join(too_long)


def test_a_long_cell_is_found(tmp_path):
    notebook = tmp_path / "long.ipynb"
    body = [f"x{i} = {i}\n" for i in range(CELL_LINES + 1)]
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["import os\n"] + body},
        {"cell_type": "code", "source": body}]}))
    rows = code_cell_lines(notebook)
    assert rows == [(0, CELL_LINES + 2, True), (1, CELL_LINES + 1, False)]
