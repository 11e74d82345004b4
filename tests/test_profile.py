"""One setting, two profiles: the quick one changes parameters only (issue 52)."""

import json
from pathlib import Path

import pytest

from tritonbook import profile

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = [*sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ROOT / "book" / "workshop.ipynb"]


def test_full_is_the_default_and_asks_for_what_the_cell_asks(monkeypatch):
    monkeypatch.delenv(profile.VARIABLE, raising=False)
    assert profile.current().name == "full"
    assert profile.rounds(5) == 5 and profile.repeats(200) == 200 and profile.warmup(20) == 20
    assert profile.loadgen_settings(None, 10, 60) == (1.0, 10, 60)
    assert profile.perf_settings(0.5, None, 20, 20.0, 3) == {
        "window_s": 0.5, "window_requests": None, "max_trials": 20, "stability": 20.0,
        "attempts": 3}
    assert profile.search_step(10, 50, 5) == 5
    assert profile.analyzer_instances((1, 2)) == (1, 2)
    assert profile.memory_requests(800) == 800 and profile.reloads(30) == 30


def test_quick_does_less_of_everything(monkeypatch):
    monkeypatch.setenv(profile.VARIABLE, "quick")
    assert profile.rounds(5) == 1 and profile.repeats(200) == 3
    assert profile.loadgen_settings(None, 10, 12) == (0.1, 4, 3)
    quick = profile.perf_settings(None, 34, 6, 20.0, 3)
    assert quick["window_requests"] == 6 and quick["max_trials"] == 3 and quick["attempts"] == 1
    assert quick["stability"] == 1000.0
    assert profile.current().navigator_window_size == 3
    assert profile.search_step(10, 50, 5) == 40  # the range's two ends only
    assert profile.analyzer_instances((1, 2)) == (1,)
    assert profile.memory_requests(800) == 24 and profile.reloads(30) == 4
    assert dict(profile.current().aoti_options) == {
        "cpp.simdlen": 1, "aot_inductor.debug_compile": True}


def test_an_aoti_package_is_keyed_by_program_weights_and_profile(monkeypatch):
    import torch

    from tritonbook import aoti

    def program(scale):
        layer = torch.nn.Linear(3, 2)
        with torch.no_grad():
            layer.weight.fill_(scale)
            layer.bias.zero_()
        return torch.export.export(layer, (torch.ones(2, 3),))

    monkeypatch.delenv(profile.VARIABLE, raising=False)
    full = aoti.program_key(program(1.0))
    assert aoti.program_key(program(1.0)) == full  # the same program, the same package
    assert aoti.program_key(program(2.0)) != full  # other weights
    monkeypatch.setenv(profile.VARIABLE, "quick")
    assert aoti.program_key(program(1.0)) != full  # other compile settings


def test_an_unknown_profile_is_refused(monkeypatch):
    monkeypatch.setenv(profile.VARIABLE, "fast")
    with pytest.raises(ValueError, match="TRITONBOOK_PROFILE must be one of"):
        profile.current()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_cell_branches_on_the_profile(path):
    # A cell may ask rounds(n) for the runs it takes, and nothing else of the profile:
    # its name, the variable and the caps stay inside the package.
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code":
            continue
        assert "TRITONBOOK_PROFILE" not in source and "profile." not in source, source[:200]
        for line in source.splitlines():
            if "tritonbook.profile" in line or "tritonbook import profile" in line:
                assert line.strip() == "from tritonbook.profile import rounds", line
