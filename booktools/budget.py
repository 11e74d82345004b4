"""A pytest plugin: each notebook's time in a CI pass, beside its budget.

    python -m pytest notebooks/*.ipynb --nbval-lax -p booktools.budget

The budgets are in ``booktools/budgets.json``, one per notebook for each pass
(``embedded``: the notebooks start their own server; ``remote``: ``TRITON_URL`` names
one started before them), in seconds of the quick profile on the slower machine of
CI's kind (2 cores without AVX-512). After the run the plugin prints every notebook's
time beside its budget and names those over it; a notebook over 1.5 times its budget
fails the run, so that the commit which slows a chapter down is the one that fails,
without making CI a benchmark. The last line repeats the failures, where a CI log's
tail shows them. A notebook with no budget fails too: a new chapter gets one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

BUDGETS = Path(__file__).resolve().parent / "budgets.json"
FAIL_FACTOR = 1.5

_started: dict[str, float] = {}
_seconds: dict[str, float] = {}
_failed: list[str] = []


def current_pass() -> str:
    return "remote" if os.environ.get("TRITON_URL") else "embedded"


def budgets(which: str | None = None) -> dict[str, float]:
    return json.loads(BUDGETS.read_text())[which or current_pass()]


def verdicts(seconds: dict[str, float], budget: dict[str, float]) -> list[tuple[str, str]]:
    """One (notebook, line) per notebook: its time, its budget, and what that means."""
    rows = []
    for name, spent in seconds.items():
        allowed = budget.get(name)
        if allowed is None:
            rows.append((name, f"{spent:7.1f} s, no budget: FAILED (add one to {BUDGETS.name})"))
        elif spent > FAIL_FACTOR * allowed:
            rows.append((name, f"{spent:7.1f} s of {allowed:g} s: FAILED, over "
                               f"{FAIL_FACTOR:g} times its budget"))
        elif spent > allowed:
            rows.append((name, f"{spent:7.1f} s of {allowed:g} s: over its budget"))
        else:
            rows.append((name, f"{spent:7.1f} s of {allowed:g} s"))
    return rows


def _notebook(item) -> str:
    return os.path.relpath(str(item.path), BUDGETS.parent.parent)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    name = _notebook(item)
    _started.setdefault(name, time.monotonic())
    yield
    if nextitem is None or _notebook(nextitem) != name:
        _seconds[name] = time.monotonic() - _started[name]


def pytest_terminal_summary(terminalreporter):
    if not _seconds:
        return
    which = current_pass()
    terminalreporter.section(f"notebook times, {which} pass, against {BUDGETS.name}")
    for name, line in verdicts(_seconds, budgets(which)):
        terminalreporter.write_line(f"{name:<40} {line}")
        if "FAILED" in line:
            _failed.append(f"{name}: {line.strip()}")
    total = sum(_seconds.values())
    terminalreporter.write_line(f"{'all notebooks':<40} {total:7.1f} s")


def pytest_sessionfinish(session):
    # The summary runs after this hook: decide from the times themselves.
    if _seconds and any("FAILED" in line for _, line in verdicts(_seconds, budgets())):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _failed and reporter is not None:
        reporter.write_line("FAILED: notebook time over budget: " + "; ".join(_failed))
