"""Invert each request's images after one wait per execution, and say what was batched."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.wait_s = float(parameters["WAIT_MS"]["string_value"]) / 1e3

    def execute(self, requests):
        # The python backend hands over each request's own tensor, so the images of one
        # execution may differ in size when the config allows a ragged batch.
        images = [pb_utils.get_input_tensor_by_name(r, "IMAGE").as_numpy() for r in requests]
        time.sleep(self.wait_s)  # one wait for the whole batch
        batched = len(requests)
        sizes = len({image.shape[2:] for image in images})
        responses = []
        for image in images:
            rows = np.full((image.shape[0], 1), 1, np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INVERTED", (1.0 - image).astype(np.float32)),
                pb_utils.Tensor("BATCHED", rows * batched),
                pb_utils.Tensor("SIZES", rows * sizes),
            ]))
        return responses
