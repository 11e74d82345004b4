"""tritonbook.analyzer: Model Analyzer's search, run for real against the embedded server,
held to what a paced model can physically do."""

import math
from pathlib import Path

import pytest

from conftest import PACE_MS, PACED_CONFIG, PACED_MODEL, write_model
from tritonbook import analyzer

pytest.importorskip("model_analyzer", reason="requirements-analyzer.txt is not installed")


def _leftovers(marker: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in command:
                found.append(command)
    return found


def test_the_search_measures_each_config_within_physics_and_ranks_by_the_objective(tmp_path):
    # One instance, PACE_MS an execution whatever it carries: without a batcher at most
    # 1000 / PACE_MS answers a second, and eight in flight wait for each other (a p95 near
    # 8 x PACE_MS); with the batcher, up to 8 requests an execution.
    folder = write_model(tmp_path, "paced", PACED_CONFIG, {"1/model.py": PACED_MODEL})
    objective_ms = 4 * PACE_MS
    search = analyzer.search(folder, {"INPUT__0": [4]}, objective_ms=objective_ms,
                             instances=(1,), max_batch=(8,), delays_us=(0,), concurrency=8,
                             window_requests=50, stability=50, max_trials=5)
    table = search.table
    # Model Analyzer's order: the configs that meet the objective first.
    meets = list(table["meets objective"])
    assert meets == sorted(meets, reverse=True)
    assert set(table.index) == {"paced_config_default", "paced_config_0"}
    default, batched = table.loc["paced_config_default"], table.loc["paced_config_0"]
    assert math.isnan(default["delay us"]) and batched["delay us"] == 0
    assert default["infer/s"] <= 1000 / PACE_MS * 1.05
    assert batched["infer/s"] <= 8 * 1000 / PACE_MS * 1.05
    for name, row in table.iterrows():
        assert row["meets objective"] == (row["p95 ms"] <= objective_ms), name
        assert row["p95 ms"] <= row["p99 ms"]
    # Eight in flight on one unbatched instance queue behind each other.
    assert default["p95 ms"] > 6 * PACE_MS and not default["meets objective"]
    assert search.best() is not None and search.best().name == "paced_config_0"
    assert "paced_config_0" in str(search) and "model-analyzer profile" in search.command
    assert not _leftovers("tritonbook-analyzer-")


def test_a_model_that_does_not_load_is_a_clear_error(tmp_path):
    broken = "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no')\n"
    folder = write_model(tmp_path, "paced", PACED_CONFIG, {"1/model.py": broken})
    # The server's own reason comes with Model Analyzer's message.
    with pytest.raises(analyzer.AnalyzerError, match="(?s)Model Analyzer failed.*RuntimeError: no"):
        analyzer.search(folder, {"INPUT__0": [4]}, objective_ms=100, instances=(1,),
                        delays_us=(0,), window_requests=10, max_trials=2, timeout=300)
    assert not _leftovers("tritonbook-analyzer-")
