"""A small MLP served by the python backend (chapter 13): 256 features in, 16 scores out.

Triton's dynamic batcher gives ``execute`` a list of requests, each with its own batch.
Running the network once per request (``EXECUTE: "loop"``) pays the network's per-call
cost for every request; running it once on the requests concatenated
(``"concatenate"``) pays it once per execution. Both give each request its own answer.
``"loop_one_buffer"`` is a mistake kept for chapter 13 to reproduce: it writes every
answer into the first rows of one array kept between calls, and the python backend
copies outputs only after ``execute`` returns, so in one execution every response but
the last starts with the last request's rows.
"""

import json
from itertools import pairwise

import numpy as np
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
        if mode not in ("loop", "concatenate", "loop_one_buffer"):
            raise pb_utils.TritonModelException(
                "parameter EXECUTE must be 'loop', 'concatenate' or 'loop_one_buffer', "
                f"not {mode!r}")
        self.mode = mode
        # "loop_one_buffer" only: room for the largest batch, allocated once.
        self.buffer = np.empty((config["max_batch_size"], 16), dtype=np.float32)
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
            if self.mode == "concatenate":
                # One run on the rows of every request, then each request
                # gets its own rows back.
                sizes = [len(x) for x in inputs]
                outputs = self.network(torch.cat(inputs)).split(sizes)
            elif self.mode == "loop":
                outputs = [self.network(x) for x in inputs]
            elif self.mode == "loop_one_buffer":
                # The mistake: every Tensor points into self.buffer, which
                # the next request overwrites before Triton copies it out.
                answers = []
                for x in inputs:
                    rows = self.buffer[: len(x)]
                    rows[:] = self.network(x).numpy()
                    answers.append(pb_utils.Tensor("SCORES", rows))
                return [pb_utils.InferenceResponse([a]) for a in answers]
        answers = [pb_utils.Tensor("SCORES", y.numpy()) for y in outputs]
        return [pb_utils.InferenceResponse([a]) for a in answers]
