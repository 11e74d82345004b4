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
