"""face_restore_python: deployment 3 of chapter 6, the whole pipeline in one python model.

The Korean article's choice: decode, detect, crop, run the TorchScript network in this
process, paste. No other model is called; the network file is loaded here with torch.
"""

import os

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

from tritonbook import pipeline
from tritonbook.instance import instance_device


class TritonPythonModel:
    def initialize(self, args):
        pipeline.use_threads(args)  # THREADS, where the config sets it
        self.detector = pipeline.FaceDetector()
        self.size = pipeline.face_size(args)
        # The TorchScript file of the model named by NETWORK, from the same repository.
        network = pipeline.parameter(args, "NETWORK", "gfpgan")
        path = os.path.join(os.path.dirname(args["model_repository"]), network, "1", "model.pt")
        # On this instance's device, as Triton places it: the GPU in the container
        # (the config gives no kind), the CPU on the embedded server.
        self.device = instance_device(args)
        self.network = torch.jit.load(path, map_location=self.device).eval()
        pb_utils.Logger.log_info(f"face_restore_python: {network} on {self.device}")

    def _run_network(self, faces):
        # As the libtorch backend runs it by default: inference mode, optimised execution.
        with torch.inference_mode(), torch.jit.optimized_execution(True):
            return self.network(torch.from_numpy(faces).to(self.device)).cpu().numpy()

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                image = pipeline.request_image(pb_utils, request)
                restored, boxes, text = pipeline.restore(image, self.detector, self._run_network, self.size)
            except Exception as exc:
                responses.append(pipeline.error_response(pb_utils, "face_restore_python", exc))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("RESTORED", restored), pb_utils.Tensor("BOXES", boxes),
                pipeline.text_tensor(pb_utils, "SUMMARY", text)]))
        return responses
