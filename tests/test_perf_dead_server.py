"""perf.run against a server that stops answering mid-run: it stops, with the server's
log, instead of waiting out its timeout. Nothing here is timed closely, so it runs
beside other tests."""

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

from tritonbook import perf

X = np.arange(4, dtype=np.float32).reshape(1, 4)


def test_a_server_that_stops_answering_ends_the_run_with_its_log(paced_server, monkeypatch):
    # A stopped process answers nothing, as a server caught in its crash handler does:
    # perf_analyzer would wait for it until its timeout. The run asks the server's
    # health every WATCH_S and gives up after SILENT_ASKS unanswered asks.
    monkeypatch.setattr(perf, "WATCH_S", 1.0)
    monkeypatch.setattr(perf, "SILENT_ASKS", 2)
    started = time.monotonic()
    # Stopped two seconds in, while perf_analyzer measures (0 % stability: it would go
    # on for 100 windows).
    stop = threading.Timer(2.0, os.kill, (paced_server.pid, signal.SIGSTOP))
    stop.start()
    try:
        with pytest.raises(perf.PerfAnalyzerError, match="stopped answering") as raised:
            perf.run(paced_server, "paced", {"INPUT__0": X}, batch=1, concurrency=[2],
                     window_s=0.5, stability=0, max_trials=100)
    finally:
        stop.cancel()
        stop.join()
        os.kill(paced_server.pid, signal.SIGCONT)
    assert time.monotonic() - started < 30
    assert "--- server log (last lines) ---" in str(raised.value)
    assert not [p for p in psutil.process_iter(["name"]) if p.info["name"] == "perf_analyzer"
                and p.ppid() == os.getpid()]
    assert paced_server.is_live()  # it answers again once it runs
