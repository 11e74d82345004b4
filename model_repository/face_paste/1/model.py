"""face_paste: the last step of chapter 6's pipeline, as its own model.

Blend each restored face back into the image and describe the result. The ensemble and
the BLS model both call it. All the work is in tritonbook.pipeline.
"""

import triton_python_backend_utils as pb_utils

from tritonbook import pipeline


class TritonPythonModel:
    def initialize(self, args):
        pipeline.use_threads(args)  # THREADS, where the config sets it

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
                faces = pb_utils.get_input_tensor_by_name(request, "FACES").as_numpy()
                boxes = pb_utils.get_input_tensor_by_name(request, "BOXES").as_numpy()
                if len(faces) < len(boxes):
                    raise pipeline.PipelineError(f"{len(boxes)} boxes but {len(faces)} faces")
                restored = pipeline.paste_faces(image, faces[: len(boxes)], boxes)
                text = pipeline.summary(image, boxes, faces.shape[-1])
            except Exception as exc:
                responses.append(pipeline.error_response(pb_utils, "face_paste", exc))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("RESTORED", restored),
                pipeline.text_tensor(pb_utils, "SUMMARY", text),
            ]))
        return responses
