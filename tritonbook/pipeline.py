"""The face-restoration pipeline of chapter 6: the steps around the network.

decode -> detect faces -> crop each face to the network's size -> (network) -> paste the
restored faces back with a feathered mask. The three deployments in ``model_repository/``
(an ensemble, a BLS model, one python model) all call these functions, so they differ
only in how the steps are wired together, which is what chapter 6 measures.

Images are RGB uint8 arrays (H, W, 3). Face crops go to the network as float32 NCHW in
[-1, 1] (what GFPGAN takes); boxes are float32 (x1, y1, x2, y2) in image pixels.

The official GFPGAN pipeline aligns each face to a template from five landmarks. This one
uses OpenCV's bundled Haar cascade and a square crop around each detection: no landmark
model to download, and the same crop-warp-paste structure.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import cv2
import numpy as np

# The crop is this many times the detected box's side (GFPGAN expects the whole head).
CROP_SCALE = 1.6
# Part of the crop's side over which a restored face fades into the original image.
FEATHER = 0.12
MIN_SIDE, MAX_SIDE = 32, 4096  # image sizes the service accepts
# At most this many faces per network call: the gfpgan config's max_batch_size.
NETWORK_BATCH = 8


class PipelineError(ValueError):
    """A request the pipeline cannot process; its text is what the client sees."""


def decode(encoded: bytes | None = None, pixels: np.ndarray | None = None) -> np.ndarray:
    """The request's image as RGB uint8 (H, W, 3), from exactly one of the two inputs.

    ``encoded``: the bytes of an image file (PNG, JPEG, BMP, ...). ``pixels``: an RGB
    uint8 array (H, W, 3).
    """
    if (encoded is None) == (pixels is None):
        raise PipelineError("send exactly one of ENCODED (image file bytes) and PIXELS (RGB uint8 H x W x 3)")
    if encoded is not None:
        data = np.frombuffer(encoded, dtype=np.uint8)
        bgr = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
        if bgr is None:
            raise PipelineError(f"ENCODED holds {data.size} bytes that OpenCV cannot decode as an image "
                                "(send the bytes of a PNG, JPEG or BMP file)")
        image = np.ascontiguousarray(bgr[:, :, ::-1])
    else:
        image = np.asarray(pixels)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise PipelineError(f"PIXELS must be uint8 of shape (H, W, 3), got {image.dtype} {image.shape}")
        image = np.ascontiguousarray(image)
    height, width = image.shape[:2]
    if min(height, width) < MIN_SIDE or max(height, width) > MAX_SIDE:
        raise PipelineError(f"image is {width}x{height}; sides must be {MIN_SIDE} to {MAX_SIDE} pixels")
    return image


class FaceDetector:
    """Frontal faces with the Haar cascade that ships inside the opencv-python wheel."""

    def __init__(self):
        path = cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
        self.cascade = cv2.CascadeClassifier(path)
        if self.cascade.empty():
            raise RuntimeError(f"could not load the face cascade {path}")

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """Boxes (x1, y1, x2, y2), float32 (n, 4), left to right."""
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        found = self.cascade.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=5, minSize=(48, 48))
        boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in found], dtype=np.float32).reshape(-1, 4)
        return boxes[np.lexsort((boxes[:, 1], boxes[:, 0]))]


def face_transform(box: np.ndarray, size: int) -> np.ndarray:
    """The 2x3 affine map from image pixels to a size x size crop around ``box``."""
    x1, y1, x2, y2 = (float(v) for v in box)
    side = max(x2 - x1, y2 - y1) * CROP_SCALE
    scale = size / side
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    return np.array([[scale, 0.0, size / 2 - scale * cx], [0.0, scale, size / 2 - scale * cy]], np.float64)


def crop_faces(image: np.ndarray, boxes: np.ndarray, size: int) -> np.ndarray:
    """One crop per box as float32 (n, 3, size, size) in [-1, 1]; borders are mirrored."""
    crops = np.empty((len(boxes), 3, size, size), np.float32)
    for i, box in enumerate(boxes):
        crop = cv2.warpAffine(image, face_transform(box, size), (size, size), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_REFLECT101)
        crops[i] = crop.transpose(2, 0, 1).astype(np.float32) / 127.5 - 1.0
    return crops


def feather_mask(size: int) -> np.ndarray:
    """1 inside, fading linearly to 0 over the outer FEATHER of the crop, float32 (size, size)."""
    ramp = max(1.0, FEATHER * size)
    position = np.arange(size, dtype=np.float32) + 0.5
    edge = np.minimum(position, size - position) / ramp
    line = np.clip(edge, 0.0, 1.0)
    return np.outer(line, line)


def paste_faces(image: np.ndarray, faces: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """The image with each restored face (float (n, 3, S, S) in [-1, 1]) blended back in."""
    if len(boxes) == 0:
        return image.copy()
    height, width = image.shape[:2]
    result = image.astype(np.float32)
    size = faces.shape[-1]
    mask = feather_mask(size)
    for face, box in zip(faces, boxes):
        back = cv2.invertAffineTransform(face_transform(box, size))
        pixels = (np.clip(face, -1.0, 1.0).transpose(1, 2, 0) + 1.0) * 127.5
        warped = cv2.warpAffine(pixels, back, (width, height), flags=cv2.INTER_LINEAR, borderValue=0)
        alpha = cv2.warpAffine(mask, back, (width, height), flags=cv2.INTER_LINEAR, borderValue=0)[..., None]
        result = alpha * warped + (1.0 - alpha) * result
    return np.clip(np.rint(result), 0, 255).astype(np.uint8)


def summary(image: np.ndarray, boxes: np.ndarray, size: int) -> str:
    """What the service did, as JSON: faces found, their boxes, image and crop sizes."""
    return json.dumps({"faces": int(len(boxes)), "boxes": np.rint(boxes).astype(int).tolist(),
                       "image": [int(image.shape[0]), int(image.shape[1])], "face_size": int(size)})


def grey_levels_apart(a: np.ndarray, b: np.ndarray) -> int:
    """The largest difference between two uint8 images, in grey levels (0 to 255): how
    far a served picture is from the reference (rounding may move a pixel by one)."""
    if a.shape != b.shape:
        raise ValueError(f"images of different shapes: {a.shape} and {b.shape}")
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max(initial=0))


def network_input(faces: np.ndarray, size: int) -> np.ndarray:
    """What goes to the network: the crops, or one grey crop when there is no face.

    An ensemble cannot skip a step, so a picture without faces still sends one crop
    through the network; the paste step ignores it (it pastes one face per box).
    """
    return faces if len(faces) else np.zeros((1, 3, size, size), np.float32)


def restore(
    image: np.ndarray,
    detector: FaceDetector,
    network: Callable[[np.ndarray], np.ndarray],
    size: int,
) -> tuple[np.ndarray, np.ndarray, str]:
    """The whole pipeline in one process: (restored image, boxes,
    summary JSON).

    ``network`` maps float32 (n, 3, size, size) to the same shape; it
    is called with at most NETWORK_BATCH faces at a time and not at all
    when there is no face.
    """
    boxes = detector(image)
    if len(boxes) == 0:
        return image.copy(), boxes, summary(image, boxes, size)
    faces = crop_faces(image, boxes, size)
    restored = np.concatenate(
        [
            network(faces[i : i + NETWORK_BATCH])
            for i in range(0, len(faces), NETWORK_BATCH)
        ]
    )
    pasted = paste_faces(image, restored, boxes)
    return pasted, boxes, summary(image, boxes, size)


def group_photo(faces: int, tile: np.ndarray, filler: np.ndarray) -> np.ndarray:
    """A test picture with ``faces`` copies of the portrait ``tile`` in a row.

    Copies alternate with a mirrored copy, so that the faces are not identical. With 0
    faces the picture is ``filler`` (a photograph with no face) resized to one tile.
    """
    size = tile.shape[0]
    if faces == 0:
        return np.ascontiguousarray(cv2.resize(filler, (size, size), interpolation=cv2.INTER_AREA))
    tiles = [tile if i % 2 == 0 else tile[:, ::-1] for i in range(faces)]
    return np.ascontiguousarray(np.concatenate(tiles, axis=1))


# ---------------------------------------------------------------------------
# Inside Triton's python backend (the stub provides ``pb_utils``)
# ---------------------------------------------------------------------------

def request_image(pb_utils, request) -> np.ndarray:
    """The image of one request, from its optional ENCODED or PIXELS input."""
    encoded = pb_utils.get_input_tensor_by_name(request, "ENCODED")
    pixels = pb_utils.get_input_tensor_by_name(request, "PIXELS")
    data = None
    if encoded is not None:
        values = encoded.as_numpy().reshape(-1)
        if values.size != 1:
            raise PipelineError(f"ENCODED must hold one image, got {values.size} elements")
        data = bytes(values[0])
    return decode(data, None if pixels is None else pixels.as_numpy())


def face_size(args: dict) -> int:
    """The crop size: the FACE_SIZE parameter, or "auto" (the default) for the size the
    traced GFPGAN in the same repository was made for."""
    from pathlib import Path

    from tritonbook.repository import gfpgan_out_size

    value = parameter(args, "FACE_SIZE", "auto")
    if value == "auto":
        return gfpgan_out_size(Path(args["model_repository"]).parent / "gfpgan" / "1" / "model.pt")
    return int(value)


def parameter(args: dict, key: str, default: str) -> str:
    """A string parameter of the model's config."""
    parameters = json.loads(args["model_config"]).get("parameters", {})
    return parameters.get(key, {}).get("string_value", default) or default


def use_threads(args: dict) -> int | None:
    """Size this process's thread pools from the THREADS parameter: OpenCV's, and
    torch's intra-op pool where the step runs a network in-process. Each instance of a
    python model is a process of its own whose pools default to one thread per core, so
    N instances on N cores would run N x N threads; chapter 6 gives each instance
    cores / N. Without the parameter the libraries keep their defaults (None). torch's
    pool is sized only if torch is imported already: call this after the model's
    imports, at the start of ``initialize``."""
    import sys

    from tritonbook.standins.common import integer

    value = parameter(args, "THREADS", "")
    try:
        threads = integer(value)
    except ValueError as error:
        raise ValueError(f"THREADS: {error}") from None
    if threads is None:
        return None
    if threads < 1:
        raise ValueError(f"THREADS must be 1 or more, not {value!r}")
    cv2.setNumThreads(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads


def text_tensor(pb_utils, name: str, text: str):
    """A TYPE_STRING tensor of shape [1]."""
    return pb_utils.Tensor(name, np.array([text.encode()], dtype=np.object_))


def error_response(pb_utils, step: str, exc: BaseException):
    """An error response naming the step that failed; the server carries on."""
    reason = str(exc) if isinstance(exc, PipelineError) else f"{type(exc).__name__}: {exc}"
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f"{step}: {reason}"))
