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
