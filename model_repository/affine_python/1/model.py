"""y = 2x + 1 on the python backend: the smallest python model of the book."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # Triton may hand over several requests at once (max_batch_size > 0);
        # each gets its own response, in order.
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT__0").as_numpy()
            y = 2 * x + 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", y)]))
        return responses
