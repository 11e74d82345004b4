"""``make check``: is this machine ready for the book? A student runs it the day before.

Each check prints one line: ``ok`` and what it found, or ``FAIL``, what it found and,
on the next line, the one fix. The last check starts the embedded Triton server, loads
a python model and a TorchScript model (served by the book's stand-in), and compares
one answer of each with y = 2x + 1. The exit status is the number of failed checks.

    python -m booktools.preflight
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHONS = ((3, 10), (3, 11), (3, 12))  # the python backend stubs of nvidia-pytriton 0.7.0
GLIBC = (2, 35)  # nvidia-pytriton 0.7.0's wheel is manylinux_2_35
# Room the chapters write into the checkout: the generated model files (815 MiB after
# `make book`, measured on the book's machine) and the compiled C++ extension, with
# margin.
FREE_DISK_GIB = 2.0
# Memory available before the chapters start: the largest peak a chapter reached in its
# committed run (booktools.execute stores each one: the kernel, the server, its stubs and
# the compilers together), with this margin on top.
MEMORY_MARGIN = 1.1


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    found: str
    fix: str = ""

    def lines(self) -> list[str]:
        first = f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.found}"
        return [first] if self.ok else [first, f"      fix: {self.fix}"]


def check_python(version: tuple[int, int] = sys.version_info[:2]) -> Check:
    found = f"Python {version[0]}.{version[1]}"
    supported = ", ".join(f"{a}.{b}" for a, b in PYTHONS)
    return Check("python", tuple(version) in PYTHONS, found,
                 f"use Python {supported} for the venv: make venv PYTHON=python3.12")


def check_glibc(version: str | None = None) -> Check:
    version = version or (os.confstr("CS_GNU_LIBC_VERSION") or "unknown").split()[-1]
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        parts = (0, 0)
    wanted = ".".join(map(str, GLIBC))
    return Check("glibc", parts >= GLIBC, f"glibc {version}",
                 f"the embedded Triton needs glibc {wanted}+ (Ubuntu 22.04, Debian 12 or "
                 "newer): use a newer system, WSL2 with Ubuntu 22.04+, or the workshop hub")


def check_libpython(ldd_lines: list[str] | None = None) -> Check:
    """The python backend stub embeds libpython3.X: ``ldd`` must find it."""
    from tritonbook import server

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if ldd_lines is None:
        ldd_lines = server.stub_ldd()
    if ldd_lines is None:
        return Check("libpython", False, "ldd is not installed",
                     "install ldd (Debian/Ubuntu: apt-get install libc-bin)")
    missing = [line.split()[0] for line in ldd_lines if "not found" in line]
    found = [line.split("=>")[-1].split("(")[0].strip()
             for line in ldd_lines if "libpython" in line and "not found" not in line]
    if missing:
        # libpython3.12.so.1.0 -> 3.12: the version the stub was built for.
        named = [m[len("libpython"):].split(".so")[0] for m in missing if m.startswith("libpython")]
        version = named[0] if named else version
        return Check("libpython", False, f"the stub cannot find {', '.join(missing)}",
                     f"apt-get install libpython{version} (Debian/Ubuntu), or a Python "
                     "built with --enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared)")
    return Check("libpython", True, found[0] if found else "found")


def check_compiler(environ: dict[str, str] | None = None) -> Check:
    environ = os.environ if environ is None else environ
    name = environ.get("CXX", "c++")
    path = shutil.which(name, path=environ.get("PATH"))
    where = "$CXX" if "CXX" in environ else "c++ on PATH"
    return Check("C++ compiler", path is not None,
                 path or f"none ({where} is {name!r})",
                 "apt-get install g++ (Debian/Ubuntu), or set CXX to your C++ compiler")


def check_disk(free_bytes: int | None = None, where: Path = ROOT) -> Check:
    free = shutil.disk_usage(where).free if free_bytes is None else free_bytes
    gib = free / 2**30
    return Check("disk", gib >= FREE_DISK_GIB, f"{gib:.1f} GiB free under {where}",
                 f"free {FREE_DISK_GIB - gib:.1f} GiB more there: the chapters write about "
                 f"{FREE_DISK_GIB:.0f} GiB of model files and builds")


def check_memory(available_bytes: int | None = None) -> Check:
    if available_bytes is None:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available_bytes = int(line.split()[1]) * 1024
                break
        else:
            available_bytes = 0
    gib = available_bytes / 2**30
    chapter, peak = largest_peak()
    needed = MEMORY_MARGIN * peak
    return Check("memory", gib >= needed, f"{gib:.1f} GiB available",
                 f"close programs to free {needed - gib:.1f} GiB, or use the workshop hub: "
                 f"{chapter} took {peak:.1f} GiB at its peak")


def largest_peak() -> tuple[str, float]:
    """The chapter whose committed run took the most memory, and that peak in GiB."""
    from booktools import workshop

    peaks = {name: chapter.peak_memory_gib for name, chapter in workshop.chapters().items()
             if chapter.peak_memory_gib is not None}
    if not peaks:
        raise RuntimeError("no chapter stores its peak memory: run `make book` first")
    chapter = max(peaks, key=peaks.get)
    return chapter, peaks[chapter]


def check_perf_analyzer(missing: list[str] | None = None) -> Check:
    from tritonbook import perf

    binary = perf.binary()
    if not binary.exists():
        return Check("perf_analyzer", False, f"not at {binary}",
                     "make venv (it takes perf_analyzer from the tritonclient 2.51.0 wheel)")
    missing = perf.missing_libraries() if missing is None else missing
    if missing:
        fix = ("apt-get install libb64-0d" if any("libb64" in m for m in missing)
               else "make venv (nvidia-cuda-runtime-cu12 carries libcudart.so.12)")
        return Check("perf_analyzer", False, f"cannot find {', '.join(missing)}", fix)
    return Check("perf_analyzer", True, str(binary))


def check_server() -> Check:
    """Start the embedded server, load two models, compare one answer of each."""
    import numpy as np

    from tritonbook import repository, server
    from tritonbook.client import infer

    started = time.monotonic()
    try:
        repository.ensure_model_files(["affine_torchscript"])
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        with server.EmbeddedTriton(load_models=["affine_python", "affine_torchscript"]) as triton:
            got = {
                "affine_python": infer(triton, "affine_python", {"INPUT__0": x},
                                       ["OUTPUT__0"])["OUTPUT__0"],
                "affine_torchscript": infer(triton, "affine_torchscript", {"input__0": x},
                                            ["output__0"], "grpc")["output__0"],
            }
    except Exception as error:  # the message is the finding
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return Check("Triton", False, first[:300],
                     "read the message above; book/troubleshooting.md lists each one with its fix")
    wrong = [name for name, y in got.items() if not np.array_equal(y, 2 * x + 1)]
    if wrong:
        return Check("Triton", False, f"wrong answer from {', '.join(wrong)}",
                     "report it: the server answered, but not y = 2x + 1")
    return Check("Triton", True, f"2.51 started, 2 models loaded, 2 answers right "
                                 f"({time.monotonic() - started:.0f} s)")


def run_all() -> list[Check]:
    checks = [check_python(), check_glibc(), check_compiler(), check_disk(), check_memory()]
    # The server needs the stub's libpython; without it, say that and not more.
    checks.append(check_libpython())
    checks.append(check_perf_analyzer())
    if checks[-2].ok:
        checks.append(check_server())
    return checks


def main() -> int:
    print(f"Checking this machine for the book ({ROOT}):")
    failed = 0
    for check in run_all():
        for line in check.lines():
            print(line, flush=True)
        failed += not check.ok
    print("ready for the book" if not failed else f"{failed} check(s) failed: fix them, then run make check again")
    return failed


if __name__ == "__main__":
    sys.exit(main())
