"""Sphinx extension: each chapter's GPU run beside it, linked both ways.

``make book-gpu`` executes the chapters on a lent GPU machine; their executed copies are
committed as ``book/gpu/<chapter>.ipynb``, each with its provenance (``booktools.execute``).
This extension puts a note at the top of a chapter that has such a copy, linking to it,
and one at the top of the copy, linking back and saying what the copy is: one run on
that GPU, in which profile, beside how many other chapters, and which cells failed. The
copies are in no table of contents (they are orphans, reached from their chapters), and
``{gpu-copies}`` on the GPU page lists them, or says that none has been made yet.
"""

from __future__ import annotations

import nbformat
from docutils import nodes
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

COPIES = "book/gpu"
CHAPTERS = "notebooks"


def _run(env, docname: str) -> dict:
    """A notebook's stored run (``booktools.execute``)."""
    return nbformat.read(env.doc2path(docname), as_version=4).metadata.get("tritonbook", {})


def _link(target: str, text: str) -> addnodes.pending_xref:
    link = addnodes.pending_xref("", refdomain="std", reftype="doc", reftarget="/" + target,
                                 refexplicit=True)
    link += nodes.inline(text=text)
    return link


def describe(run: dict) -> str:
    """What one GPU copy is, in words, from its stored run."""
    made = run.get("provenance", {})
    words = [f"one run on {made.get('gpu') or made.get('device', 'an unnamed device')}", str(run.get("executed", "?"))[:10],
             f"in the {made.get('profile', '?')} profile"]
    if made.get("jobs", 1) > 1:
        words.append(f"with {made['jobs'] - 1} other chapters running beside it")
    failed = run.get("failed_cells") or []
    words.append(f"{len(failed)} failing cell{'s' if len(failed) != 1 else ''}" if failed
                 else "no failing cell")
    if run.get("stopped"):
        words.append(run["stopped"])
    return "; ".join(words)


def add_notes(app, doctree):
    env, docname = app.env, app.env.docname
    name = docname.rsplit("/", 1)[-1]
    if docname.startswith(COPIES + "/"):
        env.metadata[docname]["orphan"] = True  # reached from its chapter
        note = nodes.note()
        what = describe(_run(env, docname))
        text = nodes.paragraph(text=f"This is the GPU run of the chapter ({what}): its code and "
                                    "outputs, with the headings of its prose, which describes "
                                    "the CPU run: ")
        text += _link(f"{CHAPTERS}/{name}", "the chapter")
        text += nodes.Text(".")
    elif docname.startswith(CHAPTERS + "/") and f"{COPIES}/{name}" in env.found_docs:
        note = nodes.note()
        copy = f"{COPIES}/{name}"
        text = nodes.paragraph(text="This chapter has also run on a GPU: ")
        text += _link(copy, "its GPU run")
        text += nodes.Text(f" ({describe(_run(env, copy))}).")
    else:
        return
    note += text
    section = next(iter(doctree.findall(nodes.section)), doctree)
    title = next(iter(section.findall(nodes.title)), None)
    section.insert(section.index(title) + 1 if title is not None else 0, note)


class GpuCopies(SphinxDirective):
    """``{gpu-copies}``: a table of the committed GPU copies, one row per chapter."""

    def run(self):
        copies = sorted(doc for doc in self.env.found_docs if doc.startswith(COPIES + "/"))
        if not copies:
            return [nodes.paragraph(text="No chapter has run on a GPU with make book-gpu yet.")]
        items = nodes.bullet_list()
        for copy in copies:
            run = _run(self.env, copy)
            line = nodes.paragraph()
            line += _link(copy, copy.rsplit("/", 1)[-1])
            line += nodes.Text(f": {describe(run)}, {run.get('run_seconds', '?')} s.")
            items += nodes.list_item("", line)
        return [items]


def setup(app):
    app.connect("doctree-read", add_notes)
    app.add_directive("gpu-copies", GpuCopies)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
