"""make check (booktools.preflight): the whole check on this machine, and each failure's
message, from a failing environment or from the values a failing machine reports."""

import os
import subprocess
import sys
import time

import pytest

from booktools import preflight
from tritonbook import server


def run_preflight(**environ):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "booktools.preflight"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **environ})
    return done, time.monotonic() - started


def test_this_machine_is_ready_in_under_a_minute():
    done, seconds = run_preflight()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout and done.stdout.rstrip().endswith("ready for the book")
    assert "ok    Triton: 2.51 started, 2 models loaded, 2 answers right" in done.stdout
    assert seconds < 60


def test_a_missing_compiler_fails_with_its_fix():
    done, _ = run_preflight(CXX="no-such-c++")
    assert done.returncode == 1, done.stdout
    assert "FAIL  C++ compiler: none ($CXX is 'no-such-c++')" in done.stdout
    assert "fix: apt-get install g++ (Debian/Ubuntu), or set CXX" in done.stdout


def test_a_stub_without_libpython_fails_with_its_fix():
    # The wheel carries a stub for each Python; one built for a Python whose libpython
    # this machine lacks fails as this Python's would without its libpython.
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version, stub in server.python_stubs().items():
        lines = subprocess.run(["ldd", str(stub)], capture_output=True, text=True).stdout
        if version != ours and f"libpython{version}.so.1.0 => not found" in lines:
            break
    else:
        pytest.skip("every stub finds its libpython here")
    check = preflight.check_libpython(lines.splitlines())
    assert not check.ok and f"libpython{version}.so.1.0" in check.found
    assert f"apt-get install libpython{version} " in check.fix and "--enable-shared" in check.fix
    assert preflight.check_libpython().ok  # this Python's stub finds its own


@pytest.mark.parametrize("check, fix", [
    (preflight.check_python((3, 9)), "use Python 3.10, 3.11, 3.12"),
    (preflight.check_glibc("2.31"), "needs glibc 2.35+"),
    (preflight.check_disk(free_bytes=2**29), "free 1.5 GiB more"),
    (preflight.check_memory(available_bytes=2**31),
     f"close programs to free {preflight.MEMORY_MARGIN * preflight.largest_peak()[1] - 2:.1f} GiB"),
    (preflight.check_perf_analyzer(missing=["libb64.so.0d"]), "apt-get install libb64-0d"),
    (preflight.check_perf_analyzer(missing=["libcudart.so.12"]), "nvidia-cuda-runtime-cu12"),
])
def test_each_failure_prints_one_fix(check, fix):
    lines = check.lines()
    assert not check.ok and len(lines) == 2 and lines[0].startswith("FAIL")
    assert fix in lines[1]


def test_supported_values_pass():
    assert preflight.check_python((3, 11)).ok and preflight.check_python((3, 12)).ok
    assert preflight.check_glibc("2.35").ok and preflight.check_glibc("2.39").ok
    assert preflight.check_perf_analyzer().ok


def test_the_memory_needed_is_the_largest_stored_peak():
    from booktools import workshop

    chapter, peak = preflight.largest_peak()
    assert peak == max(c.peak_memory_gib for c in workshop.chapters().values())
    assert f"{chapter} took {peak:.1f} GiB" in preflight.check_memory(available_bytes=0).fix
    assert preflight.check_memory(available_bytes=int(2**30 * preflight.MEMORY_MARGIN * peak) + 1).ok
