"""Sphinx extension: the notebooks' measured run times in myst-nb's execution table.

The book's HTML build never executes a notebook (``execute_notebooks: off``): ``make book``
runs them with ``python -m booktools.execute``, which stores each run's start, wall time
and outcome in the notebook's metadata (``tritonbook``). myst-nb fills its
``{nb-exec-table}`` only from runs it made itself, so this hands it those stored runs.
"""

from datetime import datetime

import nbformat
from myst_nb.sphinx_ import NbMetadataCollector


def record_stored_run(app, doctree):
    env = app.env
    source = env.doc2path(env.docname)
    # The table is of the book's CPU runs; a GPU run is shown beside its chapter.
    if not str(source).endswith(".ipynb") or env.docname.startswith("book/gpu/"):
        return
    run = nbformat.read(source, as_version=4).metadata.get("tritonbook")
    if not run or "run_seconds" not in run:
        return
    executed = run.get("executed")
    NbMetadataCollector.set_exec_data(env, env.docname, {
        "mtime": datetime.fromisoformat(executed).timestamp() if executed else None,
        "runtime": run["run_seconds"],
        "method": "make book",
        "succeeded": run.get("succeeded", True),
        "error": None,
        "traceback": None,
    })


def setup(app):
    app.connect("doctree-read", record_stored_run)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
