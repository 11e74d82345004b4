"""Work for MS milliseconds in 10 ms steps; stop early on a cancelled request if asked."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

STEP_S = 0.010


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        setting = parameters.get("POLL_CANCELLED", {}).get("string_value", "true")
        self.poll = setting.lower() == "true"

    def execute(self, requests):
        responses = []
        # The requests of one execution are worked one after another.
        for request in requests:
            asked = pb_utils.get_input_tensor_by_name(request, "MS").as_numpy()
            wanted_ms = int(asked.max())
            started = time.monotonic()
            cancelled = False
            while (time.monotonic() - started) * 1e3 < wanted_ms:
                if self.poll and request.is_cancelled():
                    cancelled = True
                    break
                time.sleep(STEP_S)
            worked = round((time.monotonic() - started) * 1e3)
            if cancelled:
                error = pb_utils.TritonError(f"cancelled after {worked} ms",
                                             pb_utils.TritonError.CANCELLED)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                worked_ms = np.full_like(asked, worked)
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("WORKED_MS", worked_ms)]))
        return responses
