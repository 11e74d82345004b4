"""INPUT in PARTS pieces, one response each, then the final flag (decoupled mode)."""

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            parts = int(pb_utils.get_input_tensor_by_name(request, "PARTS").as_numpy()[0])
            if not 1 <= parts <= max(1, values.size):
                # A bad request gets one error response, which is also its last.
                # A stream client's callback gets the message without the request:
                # the message names it.
                error = pb_utils.TritonError(
                    f"request '{request.request_id()}': PARTS must be between 1 and "
                    f"the input's {values.size} values, not {parts}")
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                continue
            for index, piece in enumerate(np.array_split(values, parts)):
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("PIECE", piece),
                    pb_utils.Tensor("INDEX", np.array([index], np.int32))]))
            # The end of this request's stream: a response with no tensors, only the flag.
            sender.send(flags=FINAL)
        # Decoupled mode: every answer went through the senders.
        return None
