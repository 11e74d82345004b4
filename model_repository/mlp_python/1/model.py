"""A small MLP served by the python backend (chapter 5): 256 features in, 16 scores out.

Triton's dynamic batcher gives ``execute`` a list of requests, each with its own batch.
Running the network once per request (``EXECUTE: "loop"``) pays the network's per-call
cost for every request; running it once on the requests concatenated
(``"concatenate"``) pays it once per execution. Both give each request its own answer.
"""

import json
from itertools import pairwise

import torch
import triton_python_backend_utils as pb_utils


def small_mlp() -> torch.nn.Module:
    # Seeded: every instance, and both variants, hold the same weights.
    torch.manual_seed(0)
    widths = [256, 2048, 2048, 2048]
    layers = []
    for n_in, n_out in pairwise(widths):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(2048, 16)).eval()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        mode = config.get("parameters", {}).get("EXECUTE", {}).get("string_value", "")
        if mode not in ("loop", "concatenate"):
            raise pb_utils.TritonModelException(
                f"parameter EXECUTE must be 'loop' or 'concatenate', not {mode!r}")
        self.concatenate = mode == "concatenate"
        # One thread per instance: the comparison is about batching, not threads.
        torch.set_num_threads(1)
        self.network = small_mlp()

    def execute(self, requests):
        arrays = [
            pb_utils.get_input_tensor_by_name(r, "FEATURES").as_numpy()
            for r in requests
        ]
        inputs = [torch.from_numpy(a) for a in arrays]
        with torch.inference_mode():
            if self.concatenate:
                # One run on the rows of every request, then each request
                # gets its own rows back.
                sizes = [len(x) for x in inputs]
                outputs = self.network(torch.cat(inputs)).split(sizes)
            else:
                outputs = [self.network(x) for x in inputs]
        answers = [pb_utils.Tensor("SCORES", y.numpy()) for y in outputs]
        return [pb_utils.InferenceResponse([a]) for a in answers]
