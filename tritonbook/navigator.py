"""Triton Model Navigator on the CPU, for the appendix that sets it beside the chapters.

Model Navigator (``triton-model-navigator`` 0.14.0, ``requirements-navigator.txt``)
exports a PyTorch model to several formats, checks and profiles each, and writes
a Triton model folder. It logs a great deal, from this process and from the child
processes it starts; ``quiet`` sends all of it to a file, and ``summary`` reads back
from its workspace what each format did, with the first error that stopped it.
``optimize`` is ``nav.torch.optimize`` run quietly, once per clone for the same model,
samples and settings: the workspace is kept in ``_build/cache/navigator/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

__all__ = ["CACHE", "config_differences", "first_errors", "optimization_profile", "optimize",
           "outcome", "quiet", "run_key", "summary"]

_PACKAGE = Path(__file__).resolve().parent
CACHE = _PACKAGE.parent / "_build" / "cache" / "navigator"

# A Python exception's last line, e.g. "TypeError: ...", not the navigator's wrappers.
_ERROR = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>\w*(?:Error|Exception)): ?(?P<text>.*)$"
)
_WRAPPERS = (
    "ModelNavigator",
    "TorchExportError",
    "ConversionError",
    "GraphConstructionError",
)
_STARTED = re.compile(r"Command '(?P<command>\w+)' started")
_REPRODUCE = re.compile(r"reproduce error: /bin/bash (?P<key>[\w-]+)/")


def optimization_profile(**fields):
    """``nav.OptimizationProfile(**fields)``; the quick profile (``tritonbook.profile``)
    times each batch size in windows of fewer samples (a window still counts)."""
    import model_navigator as nav

    from tritonbook import profile

    cap = profile.current().navigator_window_size
    if cap is not None:
        fields["window_size"] = min(fields.get("window_size", 25), cap)
    return nav.OptimizationProfile(**fields)


def run_key(model, samples, options: dict) -> str:
    """sha256 of what a navigator run's workspace depends on: the navigator's, torch's
    and the book package's code, the profile, the model's class and weights, the samples
    and the options (their reprs: enums, configs and profiles are dataclasses)."""
    import model_navigator as nav
    import torch

    from tritonbook import profile
    from tritonbook.aoti import add_tensor

    digest = hashlib.sha256()

    def add(text: str) -> None:
        digest.update(text.encode())
        digest.update(b"\0")

    add(f"{nav.__version__} {torch.__version__} {profile.current()}")
    # The model's code may live anywhere in the package (GFPGAN's layers, SRCNN's).
    for source in sorted(_PACKAGE.rglob("*.py")):
        add(str(source.relative_to(_PACKAGE)))
        digest.update(source.read_bytes())
    add(f"{type(model).__module__}.{type(model).__qualname__}")
    for name, tensor in model.state_dict().items():
        add(name)
        add_tensor(digest, tensor)
    for tensor in _tensors(samples):
        add_tensor(digest, tensor)
    for name in sorted(options):
        add(f"{name}={options[name]!r}")
    return digest.hexdigest()


def _tensors(value):
    if hasattr(value, "view") and hasattr(value, "dtype"):
        yield value
    elif isinstance(value, dict):
        for key in sorted(value):
            yield from _tensors(value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    else:
        raise TypeError(f"a navigator sample holds {type(value).__name__}, not tensors")


def optimize(model, samples, workspace: str | os.PathLike, **options):
    """``nav.torch.optimize(model=model, dataloader=samples, workspace=workspace,
    **options)`` inside ``quiet`` (its log next to the workspace, ``<workspace>.log``),
    and the package it returns.

    The workspace is a function of ``run_key``'s inputs, so it is kept in ``CACHE``:
    the same run again in this clone (the second test pass, a notebook run twice) copies
    it and loads the package from it (``nav.package.load_from_workspace``) instead of
    exporting, checking and profiling again."""
    import model_navigator as nav

    workspace = Path(workspace)
    log = workspace.with_name(workspace.name + ".log")
    cached = CACHE / run_key(model, samples, options)
    if (cached / "workspace").is_dir():
        shutil.copytree(cached / "workspace", workspace, dirs_exist_ok=True)
        shutil.copyfile(cached / "run.log", log)
        with quiet(log):
            return nav.package.load_from_workspace(workspace)
    with quiet(log):
        package = nav.torch.optimize(
            model=model, dataloader=samples, workspace=workspace, **options
        )
    # Into the cache under a temporary name, then renamed: a killed run leaves no half.
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=CACHE, suffix=".partial"))
    shutil.copytree(workspace, partial / "workspace")
    shutil.copyfile(log, partial / "run.log")
    try:
        os.rename(partial, cached)
    except OSError:  # another process cached the same run first
        shutil.rmtree(partial)
    return package


@contextlib.contextmanager
def quiet(log: str | os.PathLike):
    """Send everything written to file descriptors 1 and 2 inside the block to ``log``:
    the navigator's own messages, its child processes' and the exporters' warnings.

    The navigator also sets multiprocessing's start method to spawn when it is imported,
    for the whole process. Under spawn every lock is a named semaphore in /dev/shm that
    outlives a killed process (a notebook's kernel is killed when a test run stops it),
    so the block keeps spawn to the navigator's own runs: it sets spawn on entry once the
    navigator is imported, and puts back the method the process had on exit."""
    import multiprocessing

    import rich.jupyter

    method = multiprocessing.get_start_method(allow_none=True)
    if "model_navigator" in sys.modules:
        multiprocessing.set_start_method("spawn", force=True)

    sys.stdout.flush()
    sys.stderr.flush()
    # In a notebook, rich (the navigator's progress report) draws into the page
    # itself, not into a stream: its text goes to the log too.
    draw = rich.jupyter.display
    rich.jupyter.display = lambda segments, text: sys.stdout.write(text)
    saved = os.dup(1), os.dup(2)
    with open(log, "a") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            with (
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(out),
            ):
                yield
        finally:
            out.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            rich.jupyter.display = draw
            _close_log_sinks()
            multiprocessing.set_start_method(method, force=True)


def _close_log_sinks() -> None:
    """Release the named semaphores that a run leaves in /dev/shm.

    The navigator sets multiprocessing's start method to spawn, and under spawn a lock
    is a named semaphore that stays in /dev/shm until the lock is closed, not merely
    until the process ends if that process is killed (as a notebook's kernel is). Its
    log sinks hold such locks (the next run opens its own again), and so does tqdm's
    class-wide lock, made by the exporter's progress bar (tqdm makes a new one when it
    needs it)."""
    import gc

    from loguru import logger
    from tqdm.std import TqdmDefaultWriteLock, tqdm

    logger.remove()
    for owner, name in (
        (tqdm, "_lock"),
        (TqdmDefaultWriteLock, "mp_lock"),
    ):
        if name in vars(owner):
            delattr(owner, name)
    gc.collect()


def first_errors(
    workspace: str | os.PathLike,
) -> dict[tuple[str, str], str]:
    """(model key, command) -> the first exception that command met, from the
    workspace's ``navigator.log``: the cause, not the navigator's wrapper around it."""
    found: dict[tuple[str, str], str] = {}
    command, first = None, None
    lines = (
        (Path(workspace) / "navigator.log")
        .read_text(errors="replace")
        .splitlines()
    )
    for index, line in enumerate(lines):
        started = _STARTED.search(line)
        if started:
            command, first = started["command"], None
            continue
        error = _ERROR.match(line)
        if (
            error
            and first is None
            and not error["name"].startswith(_WRAPPERS)
        ):
            text = error["text"].strip()
            # Some errors put their message on the next line.
            if not text and index + 1 < len(lines):
                text = lines[index + 1].strip()
            first = f"{error['name']}: {text}"
        reproduce = _REPRODUCE.search(line)
        if reproduce and command and first:
            found.setdefault((reproduce["key"], command), first)
        # A profiling run that found nothing names no script to reproduce it.
        if "No profiling results found" in line and command and first:
            found.setdefault(("", command), first)
    return found


def summary(workspace: str | os.PathLike) -> list[dict]:
    """One row per format the navigator tried: did the export, the correctness check
    and the profiling pass; the largest difference the check recorded; why a step
    failed (its first exception, shortened)."""
    status = yaml.safe_load(
        (Path(workspace) / "status.yaml").read_text()
    )
    errors = first_errors(workspace)
    rows = []
    for key, model in status["models_status"].items():
        exports = model.get("status") or {}
        export = (
            "OK"
            if not exports
            else ", ".join(sorted(set(exports.values())))
        )
        for runner, state in model["runners_status"].items():
            steps = state["status"]
            tolerance = (
                state.get("result", {}).get("Correctness") or {}
            ).get("per_output_tolerance") or []
            why = [
                errors.get((key, command))
                for command in (*exports, "Correctness")
            ]
            if steps.get("Performance") == "FAIL":
                why.append(
                    errors.get((key, "Performance"))
                    or errors.get(("", "Performance"))
                )
            reason = next((w for w in why if w), "")
            rows.append(
                {
                    "format": key,
                    "runner": runner,
                    "export": export,
                    "correctness": steps.get("Correctness"),
                    "profiling": steps.get("Performance"),
                    "largest difference": max(
                        (t["atol"] for t in tolerance), default=None
                    ),
                    "first error": reason[:110],
                }
            )
    return rows


def outcome(rows, key: str) -> str:
    """"fail" when the format ``key`` failed its export or its correctness check in
    ``rows`` (``summary``'s rows, or a DataFrame of them), else "pass". Profiling is
    not counted: on a CPU-only PyTorch the torch runners cannot profile at all."""
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    found = [row for row in rows if row["format"] == key]
    if not found:
        raise KeyError(f"the navigator did not try {key!r}: {sorted({r['format'] for r in rows})}")
    broke = any("FAIL" in row["export"] or row["correctness"] == "FAIL" for row in found)
    return "fail" if broke else "pass"


def config_differences(
    ours: dict,
    theirs: dict,
    fields=(
        "platform",
        "backend",
        "max_batch_size",
        "input",
        "output",
        "instance_group",
        "dynamic_batching",
    ),
) -> list[dict]:
    """The fields where two model configs (as the server reports them) differ."""

    def shown(config, field):
        value = config.get(field)
        if field in ("input", "output") and value:
            value = ", ".join(
                f"{io['name']} {io['data_type'].removeprefix('TYPE_')} {io['dims']}"
                for io in value
            )
        elif field == "instance_group" and value:
            value = ", ".join(
                f"{g.get('kind', 'KIND_AUTO')} x{g.get('count', 1)}"
                for g in value
            )
        elif isinstance(value, dict):
            value = json.dumps(value, separators=(", ", ": "))
        return value

    return [
        {
            "field": field,
            "hand-written": shown(ours, field),
            "navigator": shown(theirs, field),
        }
        for field in fields
        if shown(ours, field) != shown(theirs, field)
    ]
