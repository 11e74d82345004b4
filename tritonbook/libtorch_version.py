"""The PyTorch version of a libtorch build, read from its ``libtorch_cpu.so``.

In the NGC Triton image, ``python3 -c "import torch"`` finds the pip-installed torch of
the book's Dockerfile, not the libtorch that the pytorch backend loads from
``/opt/tritonserver/backends/pytorch/``. That libtorch carries no version file and no
headers, but ``libtorch_cpu.so`` holds the version as a string: the ONNX exporter
compiled into it writes it as the producer version of every graph it exports. Run in
the container (the image installs this package)::

    docker compose -f docker/compose.yaml exec triton python3 -m tritonbook.libtorch_version

and compare the answer with the torch that saved your TorchScript files.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BACKEND_LIBRARY = Path("/opt/tritonserver/backends/pytorch/libtorch_cpu.so")
# The exporter's producer name, then (a few strings later) the version: 2.13.0,
# 2.13.0a0+git1234abc (an NGC build) or 2.13.0+cpu.
PRODUCER = re.compile(rb"\x00pytorch\x00(?:[A-Za-z]+\x00){0,3}(\d+\.\d+\.\d+(?:[ab]\d+)?(?:\+[0-9A-Za-z.]+)?)\x00")


def libtorch_version(library: str | Path = BACKEND_LIBRARY) -> str:
    """The version string in a ``libtorch_cpu.so``; ValueError if none or several."""
    found = sorted({m.decode() for m in PRODUCER.findall(Path(library).read_bytes())})
    if len(found) != 1:
        raise ValueError(f"{library}: expected one PyTorch version string, found {found or 'none'}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    library = Path(args[0]) if args else BACKEND_LIBRARY
    try:
        print(f"{library}: PyTorch {libtorch_version(library)}")
    except (OSError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
