"""Chapter 6's drawn pipelines: the ensemble's edges come from its config."""

import matplotlib
import pytest

from tritonbook import diagrams, repository

matplotlib.use("Agg")


def test_ensemble_edges_follow_the_config():
    edges = diagrams.ensemble_edges(repository.read_config("face_restore_ensemble"))
    assert edges == {
        ("request", "face_detect"): ["ENCODED", "PIXELS"],
        ("face_detect", "gfpgan"): ["faces"],
        ("face_detect", "face_paste"): ["BOXES", "image"],
        ("gfpgan", "face_paste"): ["restored_faces"],
        ("face_paste", "response"): ["RESTORED", "SUMMARY"],
        ("face_detect", "response"): ["BOXES"],
    }


def test_a_tensor_nothing_produces_is_an_error():
    config = repository.read_config("face_restore_ensemble")
    config["ensemble_scheduling"]["step"][1]["input_map"]["input__0"] = "no_such_tensor"
    with pytest.raises(ValueError, match="gfpgan reads 'no_such_tensor'"):
        diagrams.ensemble_edges(config)


def test_the_figure_has_both_panels():
    fig = diagrams.draw_pipelines(repository.read_config("face_restore_ensemble"))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("Ensemble") and titles[1].startswith("BLS")


def test_the_bls_panel_follows_model_py():
    # The BLS panel is drawn by hand, so check it against the code: the
    # steps in the order _restore calls them, every tensor named on an
    # arrow, the chunk size and the early exit before the network.
    import ast
    import re

    from tritonbook import pipeline

    path = repository.REPOSITORY / "face_restore_bls" / "1" / "model.py"
    tree = ast.parse(path.read_text())
    restore = next(node for node in ast.walk(tree)
                   if isinstance(node, ast.AsyncFunctionDef) and node.name == "_restore")
    calls = sorted((node for node in ast.walk(restore) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute) and node.func.attr == "_call"),
                   key=lambda node: node.lineno)
    # self.network is "gfpgan" unless the NETWORK parameter says otherwise.
    called = [call.args[0].value if isinstance(call.args[0], ast.Constant) else "gfpgan"
              for call in calls]
    strings = {node.value for node in ast.walk(restore)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}

    fig = diagrams.draw_pipelines(repository.read_config("face_restore_ensemble"))
    panel = fig.axes[1]
    nodes = sorted((text.get_position()[0], text.get_text()) for text in panel.texts
                   if text.get_text() in ("face_detect", "gfpgan", "face_paste"))
    assert [name for _, name in nodes] == called == ["face_detect", "gfpgan", "face_paste"]
    drawn = set()
    for text in panel.texts:
        drawn |= set(re.findall(r"\b[A-Z][A-Z_]+\b", text.get_text()))
    assert drawn and drawn <= strings, drawn - strings
    assert any(f"<= {pipeline.NETWORK_BATCH}" in text.get_text() for text in panel.texts)
    exits = [node for node in ast.walk(restore) if isinstance(node, ast.If)
             and any(isinstance(inner, ast.Return) for inner in node.body)]
    network_call = calls[called.index("gfpgan")]
    assert exits and exits[0].lineno < network_call.lineno
