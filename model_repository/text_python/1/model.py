"""Upper-case each UTF-8 string of the request and count its characters."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            # A TYPE_STRING input arrives as a numpy array of Python bytes objects.
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            try:
                decoded = [[b.decode("utf-8") for b in row] for row in texts]
            except UnicodeDecodeError as exc:
                error = pb_utils.TritonError(f"TEXT must be UTF-8: {exc}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            upper = np.array([[s.upper().encode("utf-8") for s in row] for row in decoded],
                             dtype=np.object_)
            length = np.array([[len(s) for s in row] for row in decoded], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("LENGTH", length)]))
        return responses
