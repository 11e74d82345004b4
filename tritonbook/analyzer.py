"""Triton Model Analyzer (``triton-model-analyzer`` 1.58.0, ``requirements-analyzer.txt``),
the field's tool for searching a model's configs under a latency objective.

It runs here in local launch mode: Model Analyzer starts the embedded ``tritonserver``
(Triton 2.51) itself, with the book's backends (the stand-ins included), loads one config
of the model after another from a repository of variants it writes, and measures each
with the book's ``perf_analyzer``. ``search`` runs its manual ("brute") search over
instance counts x max batch sizes x queue delays at one concurrency, and reads back its
results table: throughput, p95 and p99, and whether each config meets a p95 objective.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AnalyzerError", "Search", "installed", "search"]

# Model Analyzer's names for the columns it writes (its config's inference_output_fields).
FIELDS = ["model_config_path", "instance_group", "max_batch_size", "satisfies_constraints",
          "perf_throughput", "perf_latency_p95", "perf_latency_p99"]
_COLUMNS = {"Model Config Path": "config", "Instance Group": "instances",
            "Max Batch Size": "max batch", "Satisfies Constraints": "meets objective",
            "Throughput (infer/sec)": "infer/s", "p95 Latency (ms)": "p95 ms",
            "p99 Latency (ms)": "p99 ms"}


class AnalyzerError(RuntimeError):
    """Model Analyzer failed, or left a config unmeasured; the message says what it said."""


@dataclass(frozen=True)
class Search:
    """One Model Analyzer search: a row per config it measured, the best first."""

    model: str
    objective_ms: float
    table: "object"  # pandas.DataFrame, indexed by Model Analyzer's config name
    seconds: float
    command: str

    def best(self):
        """The row of the config with the highest throughput among those that meet the
        objective (Model Analyzer's own ranking), or None when none meets it."""
        meeting = self.table[self.table["meets objective"]]
        return None if meeting.empty else meeting.iloc[0]

    def __str__(self) -> str:
        best = self.best()
        if best is None:
            return f"{self.model}: no config met p95 <= {self.objective_ms:g} ms"
        batcher = ("no batcher" if math.isnan(best["delay us"])
                   else f"delay {best['delay us']:.0f} us")
        return (f"{self.model}: best within p95 <= {self.objective_ms:g} ms is "
                f"{best.name} ({best['instances']} instance(s), max batch "
                f"{best['max batch']}, {batcher}): "
                f"{best['infer/s']:.0f} infer/s, p95 {best['p95 ms']:.1f} ms")


def installed() -> str | None:
    """None when Model Analyzer and what it imports are installed, else what is missing,
    in a sentence. Looked up, not imported: importing it prints progress-bar warnings
    into a notebook."""
    from importlib.util import find_spec

    needed = ["model_analyzer", "optuna", "numba", "llvmlite", "docker", "colorlog", "pdfkit"]
    missing = [name for name in needed if find_spec(name) is None]
    if missing:
        return (f"Model Analyzer cannot run here ({', '.join(missing)} not installed): "
                "pip install --no-deps -r requirements-analyzer.txt")
    return None


def search(
    folder: str | os.PathLike,
    shape: dict[str, list[int]],
    *,
    objective_ms: float,
    instances: tuple[int, ...] = (1, 2),
    max_batch: tuple[int, ...] = (8,),
    delays_us: tuple[int, ...] = (0, 2000),
    concurrency: int = 8,
    window_requests: int = 400,
    stability: float = 20.0,
    max_trials: int = 20,
    timeout: float = 1800.0,
) -> Search:
    """Model Analyzer's search of the model in ``folder`` (a model folder: config.pbtxt
    and its version folders) over ``instances`` x ``max_batch`` x ``delays_us``, each
    config under ``concurrency`` requests in flight of the given input ``shape`` (per
    request, without the batch dimension), against a p95 objective of ``objective_ms``.

    Model Analyzer also measures the folder's own config (``<model>_config_default``).
    Its perf_analyzer stabilises on throughput and mean latency within ``stability``
    percent over windows of ``window_requests`` answers (Model Analyzer's default
    stabilises on the p95 within 10 %, which a shared CPU rarely gives); the p95 it
    reports comes from the same windows. The quick profile shortens the windows, as it
    does ``perf.run``'s, and keeps the first instance count only (``tritonbook.profile``)."""
    import pandas as pd
    import yaml

    from tritonbook import perf, profile, server

    missing = installed()
    if missing:
        raise AnalyzerError(missing)
    folder = Path(folder)
    model = folder.name
    settings = profile.perf_settings(None, window_requests, max_trials, stability, 1)
    instances = profile.analyzer_instances(instances)
    work = Path(tempfile.mkdtemp(prefix="tritonbook-analyzer-"))
    try:
        shutil.copytree(folder, work / "models" / model)
        wheel = server._wheel_paths()
        environment = server._server_environment(wheel)
        # perf_analyzer runs with the server's environment on top of ours (Model
        # Analyzer's perf_analyzer.py): the CUDA runtime it links goes on that path too.
        cuda = perf._environment().get("LD_LIBRARY_PATH", "")
        environment["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (cuda, environment["LD_LIBRARY_PATH"]) if p)
        http, grpc, metrics = server._free_ports(3)
        config = {
            "model_repository": str(work / "models"),
            "output_model_repository_path": str(work / "variants"),
            "override_output_model_repository": True,
            "export_path": str(work / "export"),
            "checkpoint_directory": str(work / "checkpoints"),
            "triton_launch_mode": "local",
            "triton_server_path": str(wheel.binary),
            "triton_http_endpoint": f"127.0.0.1:{http}",
            "triton_grpc_endpoint": f"127.0.0.1:{grpc}",
            "triton_metrics_url": f"http://127.0.0.1:{metrics}/metrics",
            # Bound to this machine only, with the book's backends and stand-ins.
            "triton_server_flags": {
                "backend-directory": str(server._prepare_backends(work / "backends")),
                "cache-directory": str(wheel.caches),
                "http-address": "127.0.0.1", "grpc-address": "127.0.0.1",
                "metrics-address": "127.0.0.1", "exit-timeout-secs": 10},
            "triton_server_environment": {
                name: environment[name] for name in ("LD_LIBRARY_PATH", "PATH")},
            "triton_output_path": str(work / "server.log"),
            "perf_analyzer_path": str(perf.binary()),
            "gpus": [],
            "run_config_search_disable": True,  # the grid below, nothing else
            "inference_output_fields": ["model_name", "batch_size", "concurrency", *FIELDS],
            "constraints": {"perf_latency_p95": {"max": objective_ms}},
            "objectives": {"perf_throughput": 10},
            "profile_models": {model: {
                "cpu_only": True,
                "model_config_parameters": {
                    "max_batch_size": list(max_batch),
                    "instance_group": [[{"kind": "KIND_CPU", "count": list(instances)}]],
                    "dynamic_batching": {"max_queue_delay_microseconds": list(delays_us)},
                },
                "parameters": {"concurrency": [concurrency], "batch_sizes": [1]},
                "perf_analyzer_flags": {
                    "shape": " ".join(f"{name}:{','.join(map(str, dims))}"
                                      for name, dims in shape.items()),
                    "measurement-mode": "count_windows",
                    "measurement-request-count": settings["window_requests"],
                    "stability-percentage": settings["stability"],
                    "max-trials": settings["max_trials"],
                },
            }},
        }
        (work / "config.yaml").write_text(yaml.safe_dump(config))
        arguments = [sys.executable, "-m", "model_analyzer.entrypoint", "profile",
                     "-f", str(work / "config.yaml")]
        started = time.perf_counter()
        said = _run(arguments, work, timeout)
        seconds = time.perf_counter() - started
        results = work / "export" / "results" / "metrics-model-inference.csv"
        if not results.exists():
            raise AnalyzerError(f"Model Analyzer wrote no results for {model}: "
                                + "; ".join(said.strip().splitlines()[-3:]))
        table = pd.read_csv(results).rename(columns=_COLUMNS).set_index("config")
        table["meets objective"] = table["meets objective"].eq("Yes")
        table["instances"] = table["instances"].str.split(":").str[0].astype(int)
        table.insert(2, "delay us", [_delay(work / "variants" / name) for name in table.index])
        expected = len(instances) * len(max_batch) * len(delays_us) + 1
        if len(table) != expected:
            errors = work / "export" / "perf_analyzer_error.log"
            detail = errors.read_text()[-1500:] if errors.exists() else said[-1500:]
            raise AnalyzerError(f"Model Analyzer measured {len(table)} of {expected} "
                                f"configs of {model}: {detail}")
        table = table[["instances", "max batch", "delay us", "infer/s", "p95 ms", "p99 ms",
                       "meets objective"]]
        shown = shlex.join(["model-analyzer", *arguments[3:]]).replace(str(work), "<work>")
        return Search(model, objective_ms, table, seconds, shown)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(arguments: list[str], work: Path, timeout: float) -> str:
    """Model Analyzer in a session of its own. Its servers and perf_analyzers start
    sessions of their own too (``start_new_session``): whatever is still running from
    ``work`` when it ends, or times out, is stopped here, so nothing outlives a search."""
    from tritonbook import perf

    process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=perf._environment(), start_new_session=True)
    try:
        said, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise AnalyzerError(f"Model Analyzer ran past {timeout:g} s") from None
    finally:
        _stop_leftovers(work)
    if process.returncode != 0:
        last = said.strip().splitlines()[-1:] or ["no output"]
        raise AnalyzerError(f"Model Analyzer failed: {last[0]}" + _server_errors(work))
    return said


def _server_errors(work: Path) -> str:
    """The lines of the server's log that say why a config did not load, if any."""
    log = work / "server.log"
    said = log.read_text(errors="replace").splitlines() if log.exists() else []
    failed = [line.split("] ", 1)[-1] for line in said if "failed to load" in line]
    return "".join(f"\n  the server: {line[:300]}" for line in failed[-2:])


def _stop_leftovers(work: Path) -> None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(work) in command and int(proc.name) != os.getpid():
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _delay(variant: Path) -> float:
    """The queue delay of a config Model Analyzer wrote: NaN without a batcher."""
    text = (variant / "config.pbtxt").read_text()
    if "dynamic_batching" not in text:
        return float("nan")
    found = re.search(r"max_queue_delay_microseconds:\s*(\d+)", text)
    return float(found.group(1)) if found else 0.0
