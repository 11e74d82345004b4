"""Student copies of the chapters: the exercises without their solutions.

    python -m booktools.student notebooks/*.ipynb --out workshop

The rendered book hides each solution behind a toggle (the ``hide-cell`` tag), but
JupyterLab shows it: a student who opens the chapter sees every solution under its
question. A student copy replaces each solution with a stub (``# your code``) followed
by the solution's own top-level ``assert`` lines, which grade the answer, and clears
every output, so nothing of the committed run is left either. A solution may span
several cells in a row (define, run, check): the copy keeps one stub for them, with the
checks of all of them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SOLUTION_TAG = "hide-cell"
STUB = "# your code"


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and SOLUTION_TAG in cell.metadata.get("tags", [])


def exercise_stub(solution: str) -> str:
    """The cell a student gets: the stub, then the solution's checks (its top-level
    ``assert`` statements, whole), or a pointer to what to compare when it has none."""
    import ast

    lines = solution.splitlines()
    checks = ["\n".join(lines[node.lineno - 1:node.end_lineno]) for node in ast.parse(solution).body
              if isinstance(node, ast.Assert)]  # whole lines: a trailing comment says why
    if not checks:
        checks = ["# No assert grades this one: compare what you print with the question."]
    return "\n".join([STUB, "", "", "# The checks:", *checks])


def solutions(cells) -> list[list[int]]:
    """The solutions of a notebook, each as the indices of its cells: solution cells
    that follow one another directly are one exercise's solution."""
    groups: list[list[int]] = []
    for index, cell in enumerate(cells):
        if not is_solution(cell):
            continue
        if groups and groups[-1][-1] == index - 1:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def student_copy(source: Path, target: Path) -> int:
    """Write the student copy of ``source`` to ``target``; return the exercises stubbed."""
    import nbformat

    notebook = nbformat.read(source, as_version=4)
    groups = solutions(notebook.cells)
    merged = set()
    for group in groups:
        first = notebook.cells[group[0]]
        first.source = exercise_stub("\n\n".join(notebook.cells[i].source for i in group))
        first.metadata.pop("tags", None)
        first.metadata.pop("mystnb", None)
        merged.update(group[1:])
    notebook.cells = [c for i, c in enumerate(notebook.cells) if i not in merged]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
    notebook.metadata.pop("tritonbook", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return len(groups)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("workshop"))
    args = parser.parse_args(argv)
    for source in args.notebooks:
        count = student_copy(source, args.out / source.name)
        print(f"{args.out / source.name}: {count} exercise(s) without their solutions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
