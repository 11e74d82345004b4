"""The book's pages against what they describe: the introduction's chapter table against
the table of contents and the notebooks' titles, and what any page says of GPU results
against the GPU record (issue 56, item 11: an introduction that went stale)."""

import json
import re
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "book").glob("*.md"))
# How a page says that there are no GPU results at all.
NO_GPU_RESULTS = re.compile(r"no GPU (?:was|is) available|\(none yet|no GPU results", re.I)
GPU_MODEL = re.compile(r"\b(?:A10G?|A100|A30|A40|H100|H200|B200|L4|L40S?|T4|V100)\b")


def toc_notebooks() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]
    return [f for f in files if f.startswith("notebooks/")]


def title(notebook: str) -> str:
    """A notebook's first heading, without its chapter number and backticks."""
    first = nbformat.read(ROOT / f"{notebook}.ipynb", as_version=4).cells[0].source
    heading = first.splitlines()[0].lstrip("# ")
    return re.sub(r"^\d+\.\s+", "", heading).replace("`", "")


def test_the_introductions_chapter_table_lists_the_table_of_contents_in_order():
    intro = (ROOT / "book" / "intro.md").read_text()
    rows = re.findall(r"^\| (\d+) \| \{doc\}`([^<]+) <\.\./(notebooks/[^>]+)>` \|$", intro,
                      re.MULTILINE)
    assert [notebook for _, _, notebook in rows] == toc_notebooks(), (
        "book/intro.md: its chapter table and _toc.yml list different notebooks")
    for number, text, notebook in rows:
        assert notebook.split("/")[1].startswith(f"{int(number):02d}_"), (number, notebook)
        assert text.replace("`", "").startswith(title(notebook)), (
            f"book/intro.md: chapter {number} is called {text!r}, its notebook "
            f"{title(notebook)!r}")


def test_the_exercises_range_the_introduction_gives_is_the_notebooks_with_exercises():
    intro = (ROOT / "book" / "intro.md").read_text()
    first, last = map(int, re.search(r"Chapters (\d+) to (\d+) end with exercises",
                                     intro).groups())
    with_exercises = [int(Path(n).name[:2]) for n in toc_notebooks()
                      if "## Exercises" in (ROOT / f"{n}.ipynb").read_text()]
    assert with_exercises == list(range(first, last + 1))


def test_what_the_pages_say_of_gpu_results_agrees_with_the_gpu_record():
    records = [json.loads(path.read_text())
               for path in sorted((ROOT / "book").glob("gpu_run*.json"))]
    devices = " ".join(str(section.get("device", "")) for record in records
                       for section in record.values() if isinstance(section, dict))
    for page in PAGES:
        text = page.read_text()
        if records:
            said = [m.group(0) for m in NO_GPU_RESULTS.finditer(text)]
            assert not said, f"{page.name} says there are no GPU results: {said}"
        for model in set(GPU_MODEL.findall(text)):
            assert model in devices, f"{page.name} names a {model}, which no GPU run used"
