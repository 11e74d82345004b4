"""The record of the book's full runs: every verdict each run printed, kept across sessions.

    book/runs.jsonl    one line per verdict of each full run; appended, never rewritten

One run's verdict can be noise: a 95 % interval excludes the truth one run in twenty,
and this book's machines change speed between sessions by more than within one. So a
direction becomes a claim of the prose only when it replicates (issue 54). After a full
run of a notebook in place (``make book``), ``booktools.execute`` appends every
``measure.Ratio`` line it printed, with

* its name: the label, which stays when cells and chapters move (a notebook may print a
  label once only);
* the hash of the code cell that printed it: a changed cell starts a new record;
* its ratio, interval, rounds and verdict;
* where it came from: the notebook, the start of the run, the commit, the CPU, the
  device.

Two runs are independent when they come from different sessions. A session here lasts
at most ``SESSION_HOURS``; runs that started within that time of the first of a group
are one sitting, and only its last run counts. A direction in the prose needs
``AGREEING`` independent runs of the same name and cell hash that give it, and none that
gives the other (``booktools.claims`` checks that).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "book" / "runs.jsonl"
SESSION_HOURS = 3
AGREEING = 3
OPPOSITE = {"higher": "lower", "lower": "higher"}
# measure.Ratio's printed line. A label may hold ": " itself ("1 face: shared memory / ...").
LINE = re.compile(r"^(?P<label>.+?): (?P<ratio>\S+)x \(95 % interval (?P<low>\S+)-(?P<high>\S+), "
                  r"(?P<rounds>\d+) paired rounds, [^)]*\): (?P<verdict>.+)$")


def cell_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def verdicts(notebook: dict) -> list[dict]:
    """Every Ratio line the notebook's code cells printed, with its cell's hash."""
    found, seen = [], set()
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream":
                continue
            for line in "".join(output["text"]).splitlines():
                match = LINE.match(line.strip())
                if match is None:
                    continue
                name = match["label"]
                if name in seen:
                    raise ValueError(f"the label {name!r} is printed twice: a verdict's "
                                     "label names it in the record, so it must be unique")
                seen.add(name)
                found.append({"name": name, "cell": cell_hash(source),
                              "ratio": float(match["ratio"]), "low": float(match["low"]),
                              "high": float(match["high"]), "rounds": int(match["rounds"]),
                              "verdict": match["verdict"]})
    return found


def append(path: Path, notebook: dict, record: Path = RECORD) -> int:
    """Add the verdicts of a full run of ``path`` that succeeded; how many were added."""
    meta = notebook.get("metadata", {}).get("tritonbook", {})
    provenance = meta.get("provenance", {})
    if provenance.get("profile") != "full" or not meta.get("succeeded"):
        return 0
    if Path(path).resolve().parent not in (ROOT / "notebooks", ROOT / "book"):
        return 0  # a copy (a test's, a GPU run's): not the book's record
    where = {"notebook": Path(path).stem, "started": meta["executed"],
             "commit": provenance.get("commit", ""), "cpu": provenance.get("cpu", ""),
             "cores": provenance.get("cores"), "device": provenance.get("device", "")}
    lines = [json.dumps({**entry, **where}) for entry in verdicts(notebook)]
    if lines:
        with open(record, "a") as out:
            out.write("\n".join(lines) + "\n")
    return len(lines)


def read(record: Path = RECORD) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def independent(entries: list[dict]) -> list[dict]:
    """The last run of each sitting: runs that started less than SESSION_HOURS after
    the first of their group are one session's, and count once."""
    kept, first = [], None
    for entry in sorted(entries, key=lambda e: e["started"]):
        started = datetime.fromisoformat(entry["started"])
        if first is None or started - first >= timedelta(hours=SESSION_HOURS):
            first = started
            kept.append(entry)
        else:
            kept[-1] = entry
    return kept


def runs_of(name: str, cell: str, entries: list[dict]) -> list[dict]:
    """The independent runs of one verdict: its name and its cell's hash."""
    return independent([e for e in entries if e["name"] == name and e["cell"] == cell])


def tally(name: str, cell: str, entries: list[dict]) -> Counter:
    """The verdicts of the independent runs of one name and cell hash."""
    return Counter(e["verdict"] for e in runs_of(name, cell, entries))


def supported(direction: str, counts: Counter) -> bool:
    """A direction replicates: AGREEING independent runs give it, none the other."""
    return counts[direction] >= AGREEING and counts[OPPOSITE[direction]] == 0


def seen_range(name: str, cell: str, entries: list[dict]) -> tuple[float, float] | None:
    """The lowest and highest ratio the independent runs gave: "it varies, by this much"."""
    ratios = [e["ratio"] for e in runs_of(name, cell, entries)]
    return (min(ratios), max(ratios)) if ratios else None


PAGE = ROOT / "book" / "replication.md"
TABLE_START = "<!-- the record's table: written by booktools.record, do not edit -->"
TABLE_END = "<!-- end of the record's table -->"


def committed_verdicts() -> dict[tuple[str, str], dict]:
    """The verdicts the committed notebooks print now, by (notebook, name)."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook = json.loads(path.read_text())
        for verdict in verdicts(notebook):
            found[path.stem, verdict["name"]] = verdict
    return found


def status(counts: Counter) -> str:
    """What the independent runs of one verdict say, in words."""
    for direction in OPPOSITE:
        if supported(direction, counts):
            return f"replicates: {direction}"
    if counts["higher"] and counts["lower"]:
        return "varies: both directions seen"
    for direction in OPPOSITE:
        if counts[direction]:
            return f"{direction} in {counts[direction]} of the {AGREEING} agreeing runs a direction needs"
    return f"no direction in {sum(counts.values())} run(s)"


def table(entries: list[dict], current: dict[tuple[str, str], dict]) -> str:
    """The record as a Markdown table: one row per verdict the notebooks print now,
    over the independent runs of its current cell, in whichever chapter they ran (a
    cell moved unchanged to another chapter keeps its history)."""
    rows = ["| chapter | verdict | runs | verdicts seen | ratios seen | status |",
            "|---|---|---|---|---|---|"]
    for (notebook, name), verdict in current.items():
        counts = tally(name, verdict["cell"], entries)
        seen = seen_range(name, verdict["cell"], entries)
        ratios = "" if seen is None else (f"{seen[0]:.2f}x" if seen[0] == seen[1]
                                          else f"{seen[0]:.2f}x to {seen[1]:.2f}x")
        words = ", ".join(f"{verdict_} {count}" for verdict_, count in sorted(counts.items()))
        rows.append(f"| {notebook[:2]} | {name} | {sum(counts.values())} | {words} | {ratios} | "
                    f"{status(counts)} |")
    return "\n".join(rows)


def write_page(page: Path = PAGE) -> None:
    """Write the record's table into the page, between its two markers."""
    text = page.read_text()
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    page.write_text(f"{head}{TABLE_START}\n{table(read(), committed_verdicts())}\n{TABLE_END}{tail}")


if __name__ == "__main__":
    write_page()
