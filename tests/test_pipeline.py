"""Chapter 6's face pipeline: the steps, and the three deployments on a real server."""

import json

import cv2
import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from conftest import wait_until_ready
from tritonbook import pipeline, repository
from tritonbook.server import TritonServerError
from tritonbook.client import infer, server_answer
from tritonbook.images import ASSETS, load_face

DEPLOYMENTS = ["face_restore_ensemble", "face_restore_bls", "face_restore_python"]
OUTPUTS = ["RESTORED", "BOXES", "SUMMARY"]


@pytest.fixture(scope="module")
def detector():
    return pipeline.FaceDetector()


@pytest.fixture(scope="module")
def pictures():
    cat = cv2.imread(str(ASSETS / "chelsea.png"))[:, :, ::-1]
    return {n: pipeline.group_photo(n, load_face(256), cat) for n in (0, 1, 2, 9)}


# The steps ---------------------------------------------------------------------------
def test_decode_pixels_and_bytes_agree(pictures):
    image = pictures[1]
    png = cv2.imencode(".png", image[:, :, ::-1])[1].tobytes()
    np.testing.assert_array_equal(pipeline.decode(png), image)
    np.testing.assert_array_equal(pipeline.decode(pixels=image), image)


@pytest.mark.parametrize("encoded, pixels, message", [
    (None, None, "send exactly one of ENCODED"),
    (b"x", np.zeros((64, 64, 3), np.uint8), "send exactly one of ENCODED"),
    (b"", None, "0 bytes that OpenCV cannot decode"),
    (b"not an image at all", None, "19 bytes that OpenCV cannot decode"),
    (None, np.zeros((64, 64, 4), np.uint8), r"PIXELS must be uint8 of shape \(H, W, 3\)"),
    (None, np.zeros((64, 64, 3), np.float32), "PIXELS must be uint8"),
    (None, np.zeros((8, 64, 3), np.uint8), "sides must be 32 to 4096"),
])
def test_decode_refuses_bad_input_clearly(encoded, pixels, message):
    with pytest.raises(pipeline.PipelineError, match=message):
        pipeline.decode(encoded, pixels)


def test_detector_finds_the_faces_placed(detector, pictures):
    for n, image in pictures.items():
        boxes = detector(image)
        assert boxes.shape == (n, 4) and boxes.dtype == np.float32
        assert (np.diff(boxes[:, 0]) > 0).all()  # left to right


def test_crop_then_paste_unchanged_faces_restores_the_image(detector, pictures):
    image = pictures[2]
    boxes = detector(image)
    faces = pipeline.crop_faces(image, boxes, 256)
    assert faces.shape == (2, 3, 256, 256) and faces.min() >= -1 and faces.max() <= 1
    pasted = pipeline.paste_faces(image, faces, boxes)
    # Warping there and back blurs a little; nothing moves.
    assert np.abs(pasted.astype(int) - image.astype(int)).mean() < 2.0
    assert np.array_equal(pipeline.paste_faces(image, faces[:0], boxes[:0]), image)


def test_paste_changes_only_the_face_regions(detector, pictures):
    image = pictures[1]
    boxes = detector(image)
    white = np.ones((1, 3, 256, 256), np.float32)
    pasted = pipeline.paste_faces(image, white, boxes)
    changed = np.any(pasted != image, axis=2)
    side = (boxes[0, 2] - boxes[0, 0]) * pipeline.CROP_SCALE
    assert changed.sum() <= side * side + 4 * side  # inside the crop square
    cx, cy = int((boxes[0, 0] + boxes[0, 2]) / 2), int((boxes[0, 1] + boxes[0, 3]) / 2)
    assert (pasted[cy, cx] == 255).all()  # the centre is fully the new face


def test_feather_mask():
    mask = pipeline.feather_mask(100)
    assert mask.shape == (100, 100) and mask[50, 50] == 1.0
    assert mask[0, 0] < 0.01 and mask[0, 50] < 0.1 and (mask >= 0).all()


def test_restore_in_process_calls_the_network_in_chunks(detector, pictures):
    calls = []

    def network(faces):
        calls.append(len(faces))
        return -faces

    image, boxes, text = pipeline.restore(pictures[9], detector, network, 64)
    assert calls == [8, 1]
    assert json.loads(text) == {"faces": 9, "boxes": np.rint(boxes).astype(int).tolist(),
                                "image": [256, 9 * 256], "face_size": 64}
    calls.clear()
    same, none, text = pipeline.restore(pictures[0], detector, network, 64)
    assert calls == [] and np.array_equal(same, pictures[0]) and none.shape == (0, 4)
    assert json.loads(text)["faces"] == 0


def test_grey_levels_apart():
    a = np.zeros((2, 3, 3), np.uint8)
    b = a.copy()
    assert pipeline.grey_levels_apart(a, b) == 0
    b[1, 2, 0] = 255  # uint8 arithmetic would wrap: 0 - 255 = 1
    assert pipeline.grey_levels_apart(a, b) == 255
    with pytest.raises(ValueError, match="shapes"):
        pipeline.grey_levels_apart(a, b[:1])


def test_network_input_has_a_face_even_without_faces():
    assert pipeline.network_input(np.zeros((0, 3, 8, 8), np.float32), 8).shape == (1, 3, 8, 8)
    faces = np.ones((2, 3, 8, 8), np.float32)
    assert pipeline.network_input(faces, 8) is faces


# The deployments on the embedded server ---------------------------------------------
@pytest.fixture(scope="module")
def triton(book_server):
    models = ["gfpgan", "face_passthrough", "face_detect", "face_paste", *DEPLOYMENTS]
    for model in models:
        book_server.load(model)
    wait_until_ready(book_server)
    yield book_server
    for model in reversed(models):
        book_server.unload(model)


@pytest.fixture(scope="module")
def reference(detector, pictures):
    import torch

    network = torch.jit.load(str(repository.REPOSITORY / "gfpgan" / "1" / "model.pt")).eval()

    def run(faces):
        with torch.inference_mode():
            return network(torch.from_numpy(faces)).numpy()

    return {n: pipeline.restore(pictures[n], detector, run, 256) for n in (0, 1, 9)}


@pytest.mark.parametrize("model", DEPLOYMENTS)
@pytest.mark.parametrize("n", [0, 1])
def test_every_deployment_gives_the_reference_answer(triton, pictures, reference, model, n):
    got = infer(triton, model, {"PIXELS": pictures[n]}, OUTPUTS, "grpc")
    image, boxes, text = reference[n]
    np.testing.assert_array_equal(got["BOXES"], boxes)
    assert got["SUMMARY"][0].decode() == text
    assert np.abs(got["RESTORED"].astype(int) - image.astype(int)).max() <= 1


@pytest.mark.parametrize("model", ["face_restore_bls", "face_restore_python"])
def test_more_faces_than_one_network_batch(triton, pictures, reference, model):
    got = infer(triton, model, {"PIXELS": pictures[9]}, OUTPUTS, "grpc")
    assert got["SUMMARY"][0].decode() == reference[9][2]
    assert np.abs(got["RESTORED"].astype(int) - reference[9][0].astype(int)).max() <= 1


def test_the_ensemble_stops_at_the_batch_limit(triton, pictures):
    with pytest.raises(InferenceServerException, match="batch-size must be <= 8"):
        infer(triton, "face_restore_ensemble", {"PIXELS": pictures[9]}, OUTPUTS, "grpc")
    assert triton.is_ready()


@pytest.mark.parametrize("model", DEPLOYMENTS)
@pytest.mark.parametrize("inputs, message", [
    ({"ENCODED": np.array([b"garbage"], dtype=np.object_)}, "7 bytes that OpenCV cannot decode"),
    ({}, "send exactly one of ENCODED"),
])
def test_bad_requests_get_an_error_and_the_server_stays_healthy(triton, model, inputs, message):
    with pytest.raises(InferenceServerException) as caught:
        infer(triton, model, inputs, OUTPUTS, "grpc")
    assert message in server_answer(caught.value)
    assert triton.is_live() and triton.is_ready() and triton.model_ready(model)


@pytest.mark.parametrize("model", DEPLOYMENTS)
def test_a_failing_network_is_an_error_answer(triton, pictures, model):
    small = {"FACE_SIZE": {"string_value": "128"}}
    changed = ["face_detect"] if model != "face_restore_python" else [model]
    for name in changed:
        config = repository.read_config(name)
        config.setdefault("parameters", {}).update(small)
        triton.load(name, config)
    try:
        with pytest.raises(InferenceServerException, match="PyTorch execute failure|size|shape"):
            infer(triton, model, {"PIXELS": pictures[1]}, OUTPUTS, "grpc")
        assert triton.is_live() and triton.model_ready(model)
    finally:
        for name in changed:
            triton.unload(name)
            triton.load(name)
    infer(triton, model, {"PIXELS": pictures[1]}, OUTPUTS, "grpc")  # serves again


def test_use_threads_sizes_this_process_pools_from_the_config():
    import torch

    def args(value):
        parameters = {} if value is None else {"THREADS": {"string_value": value}}
        return {"model_config": json.dumps({"parameters": parameters})}

    cv2_before, torch_before = cv2.getNumThreads(), torch.get_num_threads()
    try:
        assert pipeline.use_threads(args(None)) is None
        assert cv2.getNumThreads() == cv2_before  # the libraries' defaults kept
        assert pipeline.use_threads(args("1")) == 1
        assert cv2.getNumThreads() == 1 and torch.get_num_threads() == 1
        with pytest.raises(ValueError, match="THREADS must be 1 or more, not '0'"):
            pipeline.use_threads(args("0"))
        with pytest.raises(ValueError, match="THREADS: failed to convert 'two' to integral"):
            pipeline.use_threads(args("two"))
    finally:
        cv2.setNumThreads(cv2_before)
        torch.set_num_threads(torch_before)


def test_instances_with_threads_serve_the_same_answer(triton, pictures, reference):
    model = "face_restore_python"
    config = repository.config_with_instances(repository.read_config(model), 2, threads=1)
    assert config["parameters"]["THREADS"] == {"string_value": "1"}
    assert repository.read_config(model).get("parameters", {}).get("THREADS") is None
    try:
        triton.load(model, config)
        got = infer(triton, model, {"PIXELS": pictures[1]}, OUTPUTS, "grpc")
        assert got["SUMMARY"][0].decode() == reference[1][2]
        assert np.abs(got["RESTORED"].astype(int) - reference[1][0].astype(int)).max() <= 1
        # A bad value stops the load with the model's own words.
        bad = repository.config_with_instances(config, 1, threads=0)
        with pytest.raises(TritonServerError, match="THREADS must be 1 or more, not '0'"):
            triton.load(model, bad)
    finally:
        triton.load(model)
