"""Workshop schedules built from a stated teaching rate and the notebooks' run times.

A chapter's slot is the time to present its text, to run its cells, to do its exercises,
and a share on top for explaining again, debugging and questions, rounded up to five
minutes. The rate below is an assumption a teacher can change, stated in one place; the
run times are measured (``tritonbook.run_seconds``, written by
``python -m booktools.execute``). The book's workshop guide prints the schedules.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# The teaching rate. Assumptions, not measurements: change them here and every schedule
# (and the guide's tables) follows.
WORDS_PER_MINUTE = 100      # presenting the text while the class follows in the notebook
RUN_FACTOR = 1.5            # students' laptops, and cells run twice: 1.5 x the committed run
MINUTES_PER_EXERCISE = 15   # read the question, try, get one hint, see the solution
QUESTIONS_SHARE = 0.25      # explaining again, a stuck machine, questions: 25 % on top

# What each chapter's slot is for, in one sentence: the guide's schedules show it.
OBJECTIVES = {
    "00_environment": "every machine starts Triton and gets one answer",
    "01_custom_ops": "replace a compiled op by plain PyTorch and prove it equal",
    "02_simplify_forward": "make a forward traceable: no branch on data, no dict output",
    "03_trace_parity": "trace GFPGAN, prove parity, and know when a trace is wrong",
    "04_dynamic_onnx_resize": "export a dynamic ONNX Resize and serve it",
    "05_model_repository": "write config.pbtxt, load it, and read what the server reports",
    "06_pipelines": "wire one pipeline as ensemble, BLS and one model, and compare them",
    "07_production": "warm up, watch, lock down and scale a Triton server",
    "08_model_navigator": "run Model Navigator on the book's models and read what it checks",
    "09_clients": ("stream, time out and cancel requests, send tensors over 4 MiB, keep many "
                   "requests in flight, and batch images of different sizes"),
    "10_requests_and_state": ("send strings, bound a queue and retry it, keep state in a "
                              "sequence, and reload a model under load"),
    "11_half_precision": "serve a network in FP16 or behind an FP32 wrapper, and send BF16",
    "12_host_memory": ("find which process holds memory, reload without piling up stubs, "
                       "and compare allocators"),
    "13_measuring_served_models": ("measure what serving costs and what the batcher buys, "
                                   "and check each number against its ceiling"),
    "14_cpu_tuning": ("size instances and threads to the cores, tune the batcher, and find "
                      "the highest rate within a p95 objective"),
}


class ScheduleError(ValueError):
    """A plan does not fit its day, or names a chapter that has no run time."""


@dataclass(frozen=True)
class Chapter:
    notebook: str          # file name without .ipynb
    title: str
    run_seconds: float     # wall time of the committed run
    words: int             # words of text in the markdown cells
    exercises: int
    # What the committed run cost the machine (booktools.execute): CPU seconds of the
    # kernel and everything it started, the peak memory of all of them together, and
    # the slowest code cells as (section heading, seconds). None: not recorded.
    cpu_seconds: float | None = None
    peak_memory_gib: float | None = None
    slowest_cells: tuple[tuple[str, float], ...] = ()

    @property
    def cores_busy(self) -> float:
        """How many cores the committed run kept working on average: CPU / wall time."""
        return self.cpu_seconds / self.run_seconds

    def exercises_in_slot(self, asked: int | None) -> int:
        """How many exercises a slot covers: all of them for None, at most the chapter's."""
        return self.exercises if asked is None else min(asked, self.exercises)

    def slot_minutes(self, exercises: int | None = None) -> int:
        """(Present + run + ``exercises`` exercises, all by default) plus the questions
        share, rounded up to 5 minutes: the teaching rate above, applied."""
        exercises = self.exercises_in_slot(exercises)
        work = (self.words / WORDS_PER_MINUTE + RUN_FACTOR * self.run_seconds / 60
                + exercises * MINUTES_PER_EXERCISE)
        return 5 * math.ceil(work * (1 + QUESTIONS_SHARE) / 5)


def read_chapter(path: Path) -> Chapter:
    notebook = nbformat.read(path, as_version=4)
    run = notebook.metadata.get("tritonbook", {})
    if "run_seconds" not in run:
        raise ScheduleError(f"{path.name} has no stored run time: run `make book` first")
    markdown = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    heading = next(line for line in markdown[0].splitlines() if line.startswith("# "))
    slowest = tuple((_section_of(notebook.cells, c["cell"]), float(c["seconds"]))
                    for c in run.get("slowest_cells", ()))
    return Chapter(notebook=path.stem, title=heading[2:].strip(), run_seconds=float(run["run_seconds"]),
                   # A claim comment (booktools.claims) is not read: not counted.
                   words=sum(len(re.findall(r"\w+", re.sub(r"<!--.*?-->", "", text, flags=re.S)))
                             for text in markdown),
                   exercises=sum(text.startswith("### Exercise") for text in markdown),
                   cpu_seconds=run.get("cpu_seconds"), peak_memory_gib=run.get("peak_memory_gib"),
                   slowest_cells=slowest)


def _section_of(cells, index: int) -> str:
    """The heading above cell ``index``: how a reader finds a cell (nobody counts them)."""
    for cell in reversed(cells[:index]):
        if cell.cell_type == "markdown":
            for line in reversed(cell.source.splitlines()):
                if line.startswith("## ") or line.startswith("### "):
                    return line.lstrip("#").strip()
    return "the top of the chapter"


def chapters(folder: Path = NOTEBOOKS) -> dict[str, Chapter]:
    """Every chapter notebook in ``folder``, by file name without suffix."""
    return {path.stem: read_chapter(path) for path in sorted(folder.glob("[0-9][0-9]_*.ipynb"))}


def run_table(book: dict[str, Chapter]):
    """One row per chapter: run time, words, exercises and the slot with every exercise."""
    import pandas as pd

    return pd.DataFrame([{"notebook": c.notebook, "run time (s)": c.run_seconds, "words of text": c.words,
                          "exercises": c.exercises, "slot, all exercises (min)": c.slot_minutes()}
                         for c in book.values()]).set_index("notebook")


# Sizing a shared machine (a JupyterHub) for a class. An assumption, not a measurement:
# what the operating system and the hub's own services keep for themselves.
HUB_SYSTEM_GIB = 2


def cost_table(book: dict[str, Chapter]):
    """One row per chapter: what its committed run cost the machine (wall time, CPU
    time, the cores it kept busy on average, peak memory) and its slowest cell."""
    import pandas as pd

    rows = []
    for c in _with_costs(book).values():
        section, seconds = c.slowest_cells[0] if c.slowest_cells else ("", math.nan)
        rows.append({"notebook": c.notebook, "run time (s)": c.run_seconds,
                     "CPU time (s)": c.cpu_seconds,
                     "cores busy (CPU / run time)": round(c.cores_busy, 2),
                     "peak memory (GiB)": c.peak_memory_gib,
                     "slowest cell (s)": seconds, "slowest cell is under": section})
    return pd.DataFrame(rows).set_index("notebook")


def hub_size(book: dict[str, Chapter], students: int, notebooks=None) -> dict[str, float]:
    """Cores and memory for ``students`` who run the same chapter at the same time, each
    at the pace of the committed run: for the costliest of ``notebooks`` (default all),
    cores = students x CPU time / run time, rounded up, and memory = students x peak +
    HUB_SYSTEM_GIB. The cores are an average: the class's heaviest cells ask for more
    at once, and fewer cores stretch the runs in proportion."""
    if students < 1:
        raise ValueError(f"students must be at least 1, not {students}")
    chosen = _with_costs({n: book[n] for n in (notebooks or book)})
    cores = max(c.cores_busy for c in chosen.values())
    peak = max(c.peak_memory_gib for c in chosen.values())
    return {"students": students, "cores": math.ceil(students * cores),
            "memory (GiB)": math.ceil(students * peak + HUB_SYSTEM_GIB)}


def _with_costs(book: dict[str, Chapter]) -> dict[str, Chapter]:
    missing = [n for n, c in book.items() if c.cpu_seconds is None or c.peak_memory_gib is None]
    if missing:
        raise ScheduleError(f"no stored CPU time or peak memory for {', '.join(missing)}: "
                            "run `make book` first")
    return book


def schedule(plan: list[tuple], book: dict[str, Chapter], start: str = "09:00", day_minutes: int = 240):
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
        objective = OBJECTIVES.get(name, "") if kind == "chapter" else ""
        rows.append({"start": clock.strftime("%H:%M"), "minutes": minutes, "what": what,
                     "objective": objective})
        clock += timedelta(minutes=minutes)
    rows.append({"start": clock.strftime("%H:%M"), "minutes": 0, "what": "End", "objective": ""})
    table = pd.DataFrame(rows).set_index("start")
    total = int(table["minutes"].sum())
    if total > day_minutes:
        raise ScheduleError(f"the plan takes {total} minutes, more than the day's {day_minutes}")
    return table


HALF_DAY = [
    # Chapter 0 runs at home: `make book`, the last step before the day, runs it with
    # every other chapter. The welcome takes 10 minutes to see it passed on every
    # machine. (Chapters 5 and 6 grew by the sentences that now lead their cells; with
    # chapter 0's slot the morning took 250 of 240.) The morning is full, 240 of 240.
    ("fixed", "Welcome: what we build; chapter 0 passed on every machine", 10),
    # Chapters 1 to 4 are read at home: the serving chapters build the model files they
    # need from the package, so the day starts at the model repository.
    ("chapter", "05_model_repository", 1),
    # 10 minutes: chapters 5 and 6 grew again (what their measurements owe to the
    # stand-in, and why one run is not a finding, 2026-12-06).
    ("fixed", "Break", 10),
    # Chapter 6's exercises go home: with chapter 5's one, the morning holds no more.
    ("chapter", "06_pipelines", 0),
    # Each chapter's slot already holds its share of questions (QUESTIONS_SHARE).
    ("fixed", "Questions, what to read next", 5),
]

FULL_DAY = [
    # 5 minutes: the room installed the book before the day (the guide says what).
    ("fixed", "Welcome: what we build, how the book is tested", 5),
    ("chapter", "00_environment", None),
    # Chapter 1's exercise goes home: chapter 5 grew again (a python model's own
    # packages), and the day keeps the deployment exercises.
    ("chapter", "01_custom_ops", 0),
    # Chapter 2's exercises (tracing puzzles, no server) go home: the day keeps the
    # deployment tasks.
    ("chapter", "02_simplify_forward", 0),
    # 5 minutes: chapter 1's run (its C++ build) took five minutes more of its slot in
    # the run of 2026-11-29, and chapter 3's (its AOTInductor compile, 113 s) five more
    # in the next; the lunch and the afternoon break stay whole.
    ("fixed", "Break", 5),
    ("chapter", "03_trace_parity", 1),
    # 40 minutes: chapter 5 grew to over two hours (its op-library section last); the
    # day keeps every deployment exercise and both breaks.
    ("fixed", "Lunch", 40),
    # Chapter 4 (SRCNN's ONNX export) is read at home: the afternoon serves.
    ("chapter", "05_model_repository", 1),
    ("fixed", "Break", 15),
    # One exercise: chapter 6's load runs (measured until their windows agree, with
    # repeated runs for its verdicts) leave room for no second one in eight hours.
    ("chapter", "06_pipelines", 1),
    # 5 minutes: each chapter's slot already holds a quarter on top for questions, and
    # the committed times come from the slowest machine the book ran on (no AVX-512),
    # with 1.5x on top. The sentences that now lead the cells took the other ten. The
    # day is full, or within 5 minutes of it on a faster machine's run.
    ("fixed", "Questions, what to take home", 5),
]
