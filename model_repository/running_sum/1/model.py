"""Keep a running total per sequence, keyed by the request's correlation ID."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            sequence = request.correlation_id()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            end = pb_utils.get_input_tensor_by_name(request, "END").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            if start.any():
                self.totals[sequence] = 0
            self.totals[sequence] = self.totals.get(sequence, 0) + int(value.sum())
            total = np.array([self.totals[sequence]], np.int32)
            if end.any():
                del self.totals[sequence]  # the sequence is over: forget it
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", total)]))
        return responses
