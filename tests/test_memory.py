"""Chapter 12's memory readings: /proc, the stubs of a real server, the allocators."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from tritonbook import memory, server


def test_usage_reads_this_process():
    mine = memory.usage(os.getpid(), "pytest")
    assert mine.anon > 1 and mine.file > 1 and mine.shmem >= 0
    assert mine.row()["process"] == "pytest"


def test_a_process_that_has_exited_has_no_memory_to_read():
    child = subprocess.Popen(["true"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(ProcessLookupError):
        memory.usage(child.pid)
    child.wait()
    with pytest.raises(ProcessLookupError):
        memory.usage(child.pid)


def test_allocator_environments():
    assert memory.allocator_environment("glibc") == {}
    assert memory.allocator_environment("glibc, 2 arenas") == {"MALLOC_ARENA_MAX": "2"}
    tcmalloc = memory.allocator_environment("tcmalloc")
    assert tcmalloc["TCMALLOC_RELEASE_RATE"] == "200"
    assert "tcmalloc" in tcmalloc["LD_PRELOAD"]
    assert "jemalloc" in memory.allocator_environment("jemalloc")["LD_PRELOAD"]
    with pytest.raises(ValueError, match="unknown allocator"):
        memory.allocator_environment("mimalloc")


def test_a_missing_library_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "LIBRARY_DIRS", (str(tmp_path),))
    with pytest.raises(FileNotFoundError, match="libjemalloc2"):
        memory.library("jemalloc")


def test_a_remote_server_has_no_pid_to_read():
    remote = server.RemoteTriton("127.0.0.1:1", "127.0.0.1:2")
    with pytest.raises(TypeError, match="EmbeddedTriton"):
        memory.processes(remote)


def test_stubs_are_found_and_a_finished_unload_leaves_none():
    with server.EmbeddedTriton(environment=memory.allocator_environment("jemalloc")) as triton:
        triton.load("text_python")
        found = memory.processes(triton)
        assert [u.role for u in found] == ["tritonserver", "stub of text_python_0_0"]
        assert memory.preloaded(triton) == ["jemalloc"]
        triton.unload("text_python", finished=True)
        assert memory.stubs(triton.pid) == {}


def test_a_reload_test_counts_its_stubs():
    loop = memory.reload_test(2, finished=True, model="text_python")
    assert loop.failure is None and [r["stubs"] for r in loop.rows] == [1, 1]
    assert "2 cycles" in loop.summary("waited")
