"""Execute the book's notebooks in place, in this environment's kernel, and time them.

    python -m booktools.execute notebooks/*.ipynb

``make book`` runs this before building the HTML, so the committed notebooks carry the
outputs of a real run. Each notebook's wall time, the time the run started and whether it
succeeded are stored in its metadata (``tritonbook.run_seconds``, ``tritonbook.executed``,
``tritonbook.succeeded``); the workshop guide builds its schedules from them and the
book's execution table (``book/_ext/run_times.py``) shows them. Cells carry no
execution timestamps, so a re-run changes only the outputs and these three fields.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path


def execute(path: Path, timeout: int = 1800) -> float:
    """Run one notebook top to bottom in a fresh kernel; write the outputs back."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # One stream output per name, with carriage returns applied as a terminal would:
        # a progress bar is stored as its last state, not as one line per update.
        coalesce_streams=True,
        # No per-cell timestamps: committed notebooks should diff by their outputs only.
        record_timing=False,
    )
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    # This interpreter's kernel, whatever kernelspecs the machine has installed.
    client.kernel_manager_class = _current_env_kernel_manager()
    executed = datetime.now(timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    succeeded = False
    try:
        client.execute()
        succeeded = True
    finally:
        seconds = time.perf_counter() - started
        notebook.metadata["tritonbook"] = {"run_seconds": round(seconds, 1), "executed": executed,
                                           "succeeded": succeeded}
        nbformat.write(notebook, path)
    return seconds


def _current_env_kernel_manager():
    from jupyter_client.manager import KernelManager

    class CurrentEnvKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            return [sys.executable, "-m", "ipykernel_launcher", "-f", self.connection_file]

    return CurrentEnvKernelManager


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args(argv)
    failed = []
    for path in args.notebooks:
        print(f"executing {path} ...", flush=True)
        try:
            seconds = execute(path, args.timeout)
        except Exception as exc:  # report every failing notebook, then fail
            print(f"  FAILED: {type(exc).__name__}: {str(exc)[-2000:]}", flush=True)
            failed.append(path)
        else:
            print(f"  done in {seconds:.1f} s", flush=True)
    if failed:
        print("failed notebooks: " + ", ".join(map(str, failed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
