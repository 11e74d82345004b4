"""The prose's measured claims, held to the committed outputs of the full run.

A cell measures and prints; it does not assert a measured direction, since CI re-runs
it in the quick profile, whose numbers carry no conclusion. Where the prose states a
direction, its markdown cell carries the claim in a comment that the rendered book
does not show:

    <!-- claim: mlp_python, infer/s at 16 in flight, concatenate / loop => higher -->
    <!-- claim: C++ / broadcast, median time, small tensor > 1 -->

The label is the start of a line the notebook printed (``Ratio`` prints
``label: 1.92x (...): higher``); the last such line counts. ``=> words`` holds when it
ends with them (a verdict; ``a | b`` when either will do); ``> number`` and ``< number``
compare the first number after the label. ``tests/test_provenance.py`` checks every
claim against the committed outputs, so a re-run whose verdict differs fails until the
prose says what the run says.

A direction (``=> higher``, ``=> lower``) must also replicate in the record of full runs
(``booktools.record``): three independent runs that give it, none the other. Until it
does, the prose says the result has not replicated, and claims ``=> varies``, which
holds while neither direction replicates. Eight effects kept their direction in every
committed run before the record existed (the performance review of 2026-11-28 read them
in the notebooks' git history); ``=> higher (history)`` states one of them, and holds
while this run gives it and no run of the record gives the other. Only the labels of
``HISTORY`` may be claimed that way.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

CLAIM = re.compile(r"<!--\s*claim:\s*(?P<label>.+?)\s*(?P<op>=>|>|<)\s*(?P<value>.+?)\s*-->")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
HISTORY_MARK = " (history)"
# The effects the performance review of 2026-11-28 found in the same direction in every
# committed run it read (its "checks that passed"), by the label each chapter prints.
HISTORY = {
    "depthwise (book) / one channel at a time (native), time",
    "ONNX / TorchScript, time per face",
    "mlp_python, infer/s at 16 in flight, concatenate / loop",
    "orchestration alone, throughput, BLS / python model",
    "first request, no warm-up / warm-up",
    "throughput, 4 x 2 / best layout",
    "8 faces: shared memory / binary HTTP",
    "8 faces: shared memory / gRPC",
}


@dataclass(frozen=True)
class Claim:
    label: str
    op: str
    value: str
    cell: int

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.label} {self.op} {self.value}"


def claims(notebook: dict) -> list[Claim]:
    """Every claim in the notebook's markdown cells."""
    found = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            found += [Claim(m["label"], m["op"], m["value"], index) for m in CLAIM.finditer(text)]
    return found


def printed_lines(notebook: dict, before: int | None = None) -> list[str]:
    """Every line the notebook's code cells printed (stream outputs), stripped; with
    ``before``, only those of the cells above that index."""
    lines = []
    for cell in notebook["cells"][:before]:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                lines += [line.strip() for line in "".join(output["text"]).splitlines()]
    return lines


def check(claim: Claim, lines: list[str]) -> str | None:
    """None when the printed lines bear the claim out; else what is wrong."""
    matching = [line for line in lines if line.startswith(claim.label + ":")]
    if not matching:
        return f"{claim}: no printed line starts with {claim.label + ':'!r}"
    line = matching[-1]
    if claim.op == "=>":
        endings = tuple(v.strip() for v in claim.value.split("|"))
        return None if line.endswith(endings) else f"{claim}: the run printed {line!r}"
    number = NUMBER.search(line[len(claim.label) + 1:])
    if number is None:
        return f"{claim}: no number in {line!r}"
    measured, bound = float(number.group()), float(claim.value)
    holds = measured > bound if claim.op == ">" else measured < bound
    return None if holds else f"{claim}: the run printed {line!r}"


def check_record(claim: Claim, notebook: dict, entries: list[dict]) -> str | None:
    """A direction (``=> higher``, ``=> lower``) must replicate in the record of full
    runs (``booktools.record``); ``=> varies`` holds while neither direction does."""
    from booktools import record

    history = claim.value.endswith(HISTORY_MARK)
    value = claim.value.removesuffix(HISTORY_MARK)
    if claim.op != "=>" or value not in ("higher", "lower", "varies"):
        return None
    printed = {v["name"]: v for v in record.verdicts(notebook)}
    if claim.label not in printed:
        return f"{claim}: no verdict of that name in the committed run"
    counts = record.tally(claim.label, printed[claim.label]["cell"], entries)
    seen = dict(counts) or "no runs"
    if history:
        if claim.label not in HISTORY or value == "varies":
            return f"{claim}: not one of the effects that held in every run before the record"
        against = counts[record.OPPOSITE[value]]
        return f"{claim}: {against} run(s) of the record gave the opposite ({seen})" if against else None
    if claim.value == "varies":
        replicated = [d for d in record.OPPOSITE if record.supported(d, counts)]
        return f"{claim}: the record now replicates {replicated[0]!r} ({seen})" if replicated else None
    if record.supported(claim.value, counts):
        return None
    return (f"{claim}: the record of independent full runs has {seen}; a direction needs "
            f"{record.AGREEING} that agree and none against")


def problems(path: Path, entries: list[dict] | None = None) -> list[str]:
    """What the committed outputs of ``path``, and the record of full runs, do not bear
    out."""
    from booktools import record

    notebook = json.loads(Path(path).read_text())
    everything = printed_lines(notebook)
    entries = record.read() if entries is None else entries
    found = []
    for claim in claims(notebook):
        as_printed = Claim(claim.label, claim.op, claim.value.removesuffix(HISTORY_MARK), claim.cell)
        # The result the prose speaks of is printed above it; a later cell may print a
        # line of the same label from elsewhere (the GPU record's verdicts).
        above = printed_lines(notebook, before=claim.cell)
        lines = above if any(line.startswith(claim.label + ":") for line in above) else everything
        if claim.value != "varies" and (problem := check(as_printed, lines)):
            found.append(problem)
        elif problem := check_record(claim, notebook, entries):
            found.append(problem)
    return found
