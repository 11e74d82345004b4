"""y = 2x in bfloat16, the tensors passed to and from torch through DLPack."""

import json

import torch
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.read_as = parameters.get("READ_AS", {}).get("string_value", "dlpack")

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            if self.read_as == "numpy":
                x.as_numpy()  # raises for BF16: NumPy has no such type
            y = 2 * from_dlpack(x.to_dlpack())  # a torch.bfloat16 tensor, not copied
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor.from_dlpack("Y", to_dlpack(y))]))
        return responses
