"""The reader's package, `tritonbook`, has rooms that depend one way, and the book's tools
live apart from it (issue 29)."""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tritonbook"


def _imports(source: str) -> set[str]:
    """The tritonbook modules some source imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tritonbook"):
            parts = node.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from tritonbook import a, b
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("tritonbook.")}
    return found


def test_no_import_circle_in_the_package():
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {name: _imports(path.read_text()) & modules.keys() - {name} for name, path in modules.items()}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph[start])

    circles = sorted(name for name in graph if reaches(name, name))
    assert circles == [], {name: sorted(graph[name]) for name in circles}


def test_the_book_tools_are_not_in_the_readers_package():
    tools = {p.stem for p in (ROOT / "booktools").glob("*.py")} - {"__init__"}
    assert {"browser", "execute", "student", "workshop"} <= tools
    assert tools.isdisjoint(p.stem for p in PACKAGE.glob("*.py"))
    # Nothing in the reader's package reaches for the tools.
    for path in PACKAGE.rglob("*.py"):
        assert "booktools" not in path.read_text(), path


# -- the chapter map and the run-time table (CONTRIBUTING.md) ----------------------------

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FOLDERS = sorted(p.name for p in (ROOT / "model_repository").iterdir() if p.is_dir())


def _code_of(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _what_the_chapter_uses(notebook: Path) -> tuple[list[str], list[str]]:
    """The tritonbook modules its code imports, and the model folders it names."""
    modules = set().union(*(_imports(source) for source in _code_of(notebook)))
    code = "\n".join(_code_of(notebook))
    folders = [f for f in FOLDERS if f'"{f}"' in code]
    return sorted(modules), folders


def _names(text: str) -> list[str]:
    return re.findall(r"`(\w+)`", text)


def test_each_chapter_names_its_modules_and_model_folders():
    map_rows = {}
    for line in (ROOT / "CONTRIBUTING.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\d\d_\w+`", cells[0]):
            map_rows[cells[0].strip("`")] = (_names(cells[1]), _names(cells[2]))
    assert sorted(map_rows) == [c.stem for c in CHAPTERS]
    for chapter in CHAPTERS:
        modules, folders = _what_the_chapter_uses(chapter)
        assert map_rows[chapter.stem] == (modules, folders), chapter.stem
        first = next(c for c in json.loads(chapter.read_text())["cells"] if c["cell_type"] == "markdown")
        box = "".join(first["source"])
        code_line = box[box.index("**Code.**"):box.index("\n```", box.index("**Code.**"))]
        named_modules, _, named_folders = code_line.partition("Model folders")
        assert _names(named_modules)[1:] == modules, chapter.stem  # [0] is `tritonbook`
        assert _names(named_folders) == folders, chapter.stem


def test_each_stored_slowest_cell_is_a_code_cell():
    # The run stores cells by index; a cell inserted after the run shifts them, and
    # the workshop guide would then name the wrong section for the slowest cell.
    for path in [*CHAPTERS, ROOT / "book" / "workshop.ipynb"]:
        notebook = json.loads(path.read_text())
        for slow in notebook["metadata"]["tritonbook"].get("slowest_cells", []):
            assert notebook["cells"][slow["cell"]]["cell_type"] == "code", (path.name, slow)


def test_contributing_run_times_are_the_notebooks_own():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    table = dict(re.findall(r"^\| `([\w/]+)` \| ([\d.]+) s", text, re.M))
    stored = {}
    for path in [*CHAPTERS, ROOT / "book" / "workshop.ipynb"]:
        name = path.stem if path.parent.name == "notebooks" else f"book/{path.stem}"
        stored[name] = json.loads(path.read_text())["metadata"]["tritonbook"]["run_seconds"]
    assert {k: float(v) for k, v in table.items()} == stored
    total = round(sum(stored.values()), 1)
    minutes, seconds = divmod(round(total), 60)
    assert f"Total: {total} s ({minutes} min {seconds} s)" in text


def test_the_readme_fits_one_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 60
    first = "\n".join(lines[:30])
    assert "make book" in first and "make test" in first
    # CI runs nothing the README does not tell a reader.
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line and not line.startswith(("#", "set ", "cd ", "export "))]
    text = "\n".join(lines)
    for line in ci:
        assert line in text or line.replace("make ", "TRITONBOOK_PROFILE=quick make ") in text, line
