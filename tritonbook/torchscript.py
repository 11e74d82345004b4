"""Reading TorchScript's compiler errors (chapter 3).

``torch.jit.script`` compiles Python source and stops at the first construct outside
TorchScript's subset. Its error holds the reason on the first line, then the source
with ``~~~ <--- HERE`` under the offending expression, then the call stack; the reader
wants the reason and the line.
"""

from __future__ import annotations

MARKER = "<--- HERE"


def script_error_summary(error: BaseException) -> str:
    """The reason and the offending source line of a ``torch.jit.script`` error:
    ``"<Type>: <reason>\\nat: <line>"``, or the reason alone when the error does not
    point at a line."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    summary = f"{type(error).__name__}: {lines[0]}"
    # The marker line underlines the expression in the source line above it.
    marked = [i for i, line in enumerate(lines) if MARKER in line and i > 0]
    if marked:
        summary += "\nat: " + lines[marked[0] - 1].strip()
    return summary
