"""Reading what PyTorch's compilers say: TorchScript's tracer warnings (chapter 2), its
compiler's errors, and the ONNX exporter's chain of causes (chapter 3).

``torch.jit.script`` compiles Python source and stops at the first construct outside
TorchScript's subset. Its error holds the reason (after an operator's schema, when a
call did not match one), then the source with ``~~~ <--- HERE`` under the offending
expression, then the call stack; the reader wants the reason and the line.
"""

from __future__ import annotations

import textwrap
from collections import Counter

MARKER = "<--- HERE"


def warning_counts(caught, width: int = 110) -> list[str]:
    """One line per kind of warning in ``caught`` (the list that
    ``warnings.catch_warnings(record=True)`` fills), sorted by category, then message:
    ``"<n> x <Category>: <first line of the message>"``, the message cut at ``width``.
    The tracer repeats one warning per call site, so a trace of a large network gives
    hundreds of records and a handful of kinds."""
    counts = Counter(
        (w.category.__name__, (str(w.message).strip().splitlines() or [""])[0][:width])
        for w in caught
    )
    return [f"{n:>3} x {category}: {text}"
            for (category, text), n in sorted(counts.items())]


def script_error_summary(error: BaseException, width: int | None = None) -> str:
    """The reason and the offending source line of a ``torch.jit.script`` error:
    ``"<Type>: <reason>\\nat: <line>"``, or the reason alone when the error does not
    point at a line. ``width`` shortens the reason to that many characters."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # The reason is the last line before the source excerpt ("  File ..."); a schema
    # line (``op(Tensor input, ...) -> Tensor:``) or a lone ":" may come before it.
    first_file = next((i for i, line in enumerate(lines) if line.lstrip().startswith("File ")), len(lines))
    head = [line.strip().rstrip(":").strip() for line in lines[:first_file]]
    head = [line for line in head if line] or [lines[0].strip()]
    reason = head[-1]
    if width is not None:
        reason = textwrap.shorten(reason, width, placeholder=" ...")
    summary = f"{type(error).__name__}: {reason}"
    # Each source line in the excerpt has a line of ~ under it; the last ~ line ends in
    # the marker. The expression starts at the first underlined line.
    marked = [i for i, line in enumerate(lines) if MARKER in line and i > 0]
    if marked:
        start = marked[0] - 1
        while start >= 2 and set(lines[start - 1].strip()) == {"~"}:
            start -= 2
        summary += "\nat: " + lines[start].strip()
    return summary


def script_failure(module, width: int | None = 80) -> str:
    """``script_error_summary`` of ``torch.jit.script(module)``, which must fail:
    AssertionError when it scripts."""
    import torch

    try:
        torch.jit.script(module)
    except RuntimeError as error:
        return script_error_summary(error, width)
    raise AssertionError(f"{type(module).__name__}: expected torch.jit.script to fail")


_EXPORTER_PATHS = ("torch.onnx._internal.exporter._tensors.",)


def export_error_causes(error: BaseException) -> list[str]:
    """The causes listed in an error of ``torch.onnx.export(..., dynamo=True)``, in the
    order its summary gives them (innermost first). The summary names each cause on a
    line ``<class '...'>: message``; the message is kept up to the node's dump of its
    inputs (``. named_inputs=...``), with the exporter's private module paths dropped."""
    causes = []
    for line in str(error).splitlines():
        if line.startswith("<class") and ": " in line:
            message = line.split(": ", 1)[1].split(". named_inputs")[0]
            for path in _EXPORTER_PATHS:
                message = message.replace(path, "")
            causes.append(message)
    return causes
