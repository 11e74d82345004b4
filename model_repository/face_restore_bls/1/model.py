"""face_restore_bls: deployment 2 of chapter 6, the pipeline as Business Logic Scripting.

One python model that calls face_detect, the network and face_paste through Triton with
``async_exec``. Unlike the ensemble it can branch and loop: a picture with no face
returns right after detection, and any number of faces goes to the network in chunks
of at most eight (its max_batch_size), all chunks in flight at once. Inside this
process DLPack lets torch read a response's tensor without a copy; between processes
the tensors still go through the python backend's shared memory.
"""

import asyncio

import torch
import triton_python_backend_utils as pb_utils

from tritonbook import pipeline


class StepError(Exception):
    """A called model answered with an error."""


class TritonPythonModel:
    def initialize(self, args):
        # Which model does the restoring: "gfpgan", or another with the same tensors
        # (chapter 6 switches to face_passthrough to measure the orchestration alone).
        self.network = pipeline.parameter(args, "NETWORK", "gfpgan")

    async def execute(self, requests):
        # The requests of one call are independent: handle them concurrently.
        return list(await asyncio.gather(*(self._respond(r) for r in requests)))

    async def _respond(self, request):
        try:
            return await self._restore(request)
        except StepError as exc:
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc)))
        except Exception as exc:
            return pipeline.error_response(pb_utils, "face_restore_bls", exc)

    async def _call(self, model, inputs, outputs):
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
        response = await request.async_exec()
        if response.has_error():
            # The step's own message, which already names the step when it is ours.
            raise StepError(response.error().message())
        return [pb_utils.get_output_tensor_by_name(response, name) for name in outputs]

    async def _restore(self, request):
        given = [t for t in (pb_utils.get_input_tensor_by_name(request, n) for n in ("ENCODED", "PIXELS"))
                 if t is not None]
        image, faces, boxes = await self._call("face_detect", given, ["IMAGE", "FACES", "BOXES"])
        box_array = boxes.as_numpy()
        if len(box_array) == 0:
            # Early exit: no face, so neither the network nor face_paste runs.
            pixels = image.as_numpy()
            text = pipeline.summary(pixels, box_array, faces.shape()[-1])
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("RESTORED", pixels), pb_utils.Tensor("BOXES", box_array),
                pipeline.text_tensor(pb_utils, "SUMMARY", text)])

        # DLPack: a torch view of face_detect's output, sliced into chunks, each handed to
        # the network as its input tensor; nothing is copied on the way.
        crops = torch.from_dlpack(faces.to_dlpack())
        chunks = [crops[i:i + pipeline.NETWORK_BATCH] for i in range(0, len(box_array), pipeline.NETWORK_BATCH)]
        answers = await asyncio.gather(*(
            self._call(self.network, [pb_utils.Tensor.from_dlpack("input__0", chunk.contiguous())], ["output__0"])
            for chunk in chunks))
        restored = torch.cat([torch.from_dlpack(output.to_dlpack()) for (output,) in answers])
        pasted, summary = await self._call(
            "face_paste", [pb_utils.Tensor.from_dlpack("IMAGE", image.to_dlpack()),
                           pb_utils.Tensor.from_dlpack("FACES", restored),
                           pb_utils.Tensor.from_dlpack("BOXES", boxes.to_dlpack())],
            ["RESTORED", "SUMMARY"])
        return pb_utils.InferenceResponse(output_tensors=[pasted, pb_utils.Tensor("BOXES", box_array), summary])
