"""A chapter's GPU run beside it in the rendered book, linked both ways (issue 53)."""

import subprocess
import sys
from pathlib import Path

import nbformat

from booktools import execute

ROOT = Path(__file__).resolve().parents[1]


def test_a_published_gpu_run_renders_beside_its_chapter(tmp_path):
    book = tmp_path / "book"  # the runner's copies and archive stay outside it
    chapter = book / "notebooks" / "00_zero.ipynb"
    chapter.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Zero\n\n(zero-label)=\nSee [the intro](../intro.md).\n\n## Part"),
        nbformat.v4.new_code_cell("print('on this device')")]), chapter)
    packed = tmp_path / "book-gpu.tar.gz"
    assert execute.main(["--keep-going", "--out", str(tmp_path / "out"), "--archive", str(packed),
                         str(chapter)]) == 0
    execute.execute(chapter)  # the chapter's own (CPU) run
    [page] = execute.publish(packed, book / "book" / "gpu")
    copy = nbformat.read(page, as_version=4)
    # The prose's headings only: no label or relative link to break from another folder.
    assert [c.source for c in copy.cells if c.cell_type == "markdown"] == ["# Zero\n\n## Part"]
    assert copy.cells[-1].outputs[0].text == "on this device\n"
    assert copy.metadata["tritonbook"]["provenance"]["device"].startswith("device: ")

    (book / "intro.md").write_text("# Intro\n\n```{gpu-copies}\n```\n")
    (book / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/00_zero\n")
    (book / "_config.yml").write_text(
        "title: t\nexecute:\n  execute_notebooks: 'off'\nsphinx:\n  local_extensions:\n"
        f"    gpu_copies: {ROOT / 'book' / '_ext'}\n")
    built = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", "-W",
                            "--keep-going", str(book)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    html = book / "_build" / "html"
    chapter_page = (html / "notebooks" / "00_zero.html").read_text()
    gpu_page = (html / "book" / "gpu" / "00_zero.html").read_text()
    assert "This chapter has also run on a GPU" in chapter_page
    assert 'href="../book/gpu/00_zero.html"' in chapter_page
    assert "This is the GPU run of the chapter" in gpu_page and "one run on device: " in gpu_page
    assert 'href="../../notebooks/00_zero.html"' in gpu_page
    assert 'href="book/gpu/00_zero.html"' in (html / "intro.html").read_text()
