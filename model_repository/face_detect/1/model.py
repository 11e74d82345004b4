"""face_detect: the first step of chapter 6's pipeline, as its own model.

Decode the image, find the faces, crop each one to the network's size. The ensemble
and the BLS model both call it. All the work is in tritonbook.pipeline.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from tritonbook import pipeline


class TritonPythonModel:
    def initialize(self, args):
        pipeline.use_threads(args)  # THREADS, where the config sets it
        self.detector = pipeline.FaceDetector()
        self.size = pipeline.face_size(args)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                image = pipeline.request_image(pb_utils, request)
                boxes = self.detector(image)
                faces = pipeline.crop_faces(image, boxes, self.size)
            except Exception as exc:  # a bad request gets an error; the model carries on
                responses.append(pipeline.error_response(pb_utils, "face_detect", exc))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("IMAGE", image),
                pb_utils.Tensor("FACES", pipeline.network_input(faces, self.size)),
                pb_utils.Tensor("BOXES", boxes),
            ]))
        return responses
