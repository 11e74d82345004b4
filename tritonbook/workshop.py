"""Workshop schedules built from the notebooks' measured run times.

A chapter's slot is the time to present its text, plus the time its cells took to run in
the committed run (``tritonbook.run_seconds``, written by ``python -m tritonbook.notebooks``),
plus a fixed time per exercise, rounded up to five minutes. The book's workshop guide
prints the two schedules this module makes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
WORDS_PER_MINUTE = 100  # a teacher presenting the text with the class, not silent reading
MINUTES_PER_EXERCISE = 10


class ScheduleError(ValueError):
    """A plan does not fit its day, or names a chapter that has no run time."""


@dataclass(frozen=True)
class Chapter:
    notebook: str          # file name without .ipynb
    title: str
    run_seconds: float     # wall time of the committed run
    words: int             # words of text in the markdown cells
    exercises: int

    def exercises_in_slot(self, asked: int | None) -> int:
        """How many exercises a slot covers: all of them for None, at most the chapter's."""
        return self.exercises if asked is None else min(asked, self.exercises)

    def slot_minutes(self, exercises: int | None = None) -> int:
        """Present + run + ``exercises`` exercises (all of them by default), up to 5 minutes."""
        exercises = self.exercises_in_slot(exercises)
        minutes = self.words / WORDS_PER_MINUTE + self.run_seconds / 60 + exercises * MINUTES_PER_EXERCISE
        return 5 * math.ceil(minutes / 5)


def read_chapter(path: Path) -> Chapter:
    notebook = nbformat.read(path, as_version=4)
    run = notebook.metadata.get("tritonbook", {})
    if "run_seconds" not in run:
        raise ScheduleError(f"{path.name} has no stored run time: run `make book` first")
    markdown = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    heading = next(line for line in markdown[0].splitlines() if line.startswith("# "))
    return Chapter(notebook=path.stem, title=heading[2:].strip(), run_seconds=float(run["run_seconds"]),
                   words=sum(len(re.findall(r"\w+", text)) for text in markdown),
                   exercises=sum(text.startswith("### Exercise") for text in markdown))


def chapters(folder: Path = NOTEBOOKS) -> dict[str, Chapter]:
    """Every chapter notebook in ``folder``, by file name without suffix."""
    return {path.stem: read_chapter(path) for path in sorted(folder.glob("[0-9][0-9]_*.ipynb"))}


def run_table(book: dict[str, Chapter]):
    """One row per chapter: run time, words, exercises and the slot with every exercise."""
    import pandas as pd

    return pd.DataFrame([{"notebook": c.notebook, "run time (s)": c.run_seconds, "words of text": c.words,
                          "exercises": c.exercises, "slot, all exercises (min)": c.slot_minutes()}
                         for c in book.values()]).set_index("notebook")


def schedule(plan: list[tuple], book: dict[str, Chapter], start: str = "09:00", day_minutes: int = 210):
    """A timetable for ``plan`` as a DataFrame indexed by start time (minutes, what).

    ``plan`` holds ``("chapter", notebook, exercises)`` and ``("fixed", label, minutes)``
    entries. Raises ScheduleError when the whole does not fit in ``day_minutes``.
    """
    import pandas as pd

    clock = datetime.strptime(start, "%H:%M")
    rows = []
    for kind, name, amount in plan:
        if kind == "chapter":
            if name not in book:
                raise ScheduleError(f"no chapter notebook {name!r}")
            chapter = book[name]
            done = chapter.exercises_in_slot(amount)
            minutes = chapter.slot_minutes(done)
            what = f"{chapter.title} ({done} of {chapter.exercises} exercises)" if chapter.exercises else chapter.title
        else:
            minutes, what = amount, name
        rows.append({"start": clock.strftime("%H:%M"), "minutes": minutes, "what": what})
        clock += timedelta(minutes=minutes)
    rows.append({"start": clock.strftime("%H:%M"), "minutes": 0, "what": "End"})
    table = pd.DataFrame(rows).set_index("start")
    total = int(table["minutes"].sum())
    if total > day_minutes:
        raise ScheduleError(f"the plan takes {total} minutes, more than the day's {day_minutes}")
    return table


HALF_DAY = [
    ("fixed", "Welcome: what we build, how the book is tested", 10),
    ("chapter", "00_environment", None),
    # Chapter 2 is read at home: chapter 3 starts from its deploy wrapper.
    ("chapter", "03_trace_parity", 1),
    ("fixed", "Break", 15),
    ("chapter", "05_model_repository", 1),
    ("chapter", "06_pipelines", 1),
    ("fixed", "Questions, what to read next", 10),
]

FULL_DAY = [
    ("fixed", "Welcome: what we build, how the book is tested", 15),
    ("chapter", "00_environment", None),
    # Exercise 1.1 (double backward) is about training, not serving: left for home.
    ("chapter", "01_custom_ops", 1),
    ("chapter", "02_simplify_forward", None),
    ("fixed", "Break", 15),
    ("chapter", "03_trace_parity", None),
    ("fixed", "Lunch", 60),
    ("chapter", "04_dynamic_onnx_resize", None),
    ("chapter", "05_model_repository", None),
    ("fixed", "Break", 15),
    ("chapter", "06_pipelines", None),
    ("fixed", "Questions, what to take home", 15),
]
