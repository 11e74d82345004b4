"""face_restore_bls: chapter 6's deployment 2, the pipeline as Business
Logic Scripting.

One python model that calls face_detect, the network and face_paste
through Triton with ``async_exec``. Unlike the ensemble it can branch
and loop: a picture with no face returns right after detection, and any
number of faces goes to the network in chunks of at most eight (its
max_batch_size), all chunks in flight at once. Inside this process
DLPack lets torch read a response's tensor without a copy; between
processes the tensors still go through the python backend's shared
memory.
"""

import asyncio

import torch
import triton_python_backend_utils as pb_utils

from tritonbook import pipeline


class StepError(Exception):
    """A called model answered with an error."""


class TritonPythonModel:
    def initialize(self, args):
        pipeline.use_threads(args)  # THREADS, where the config sets it
        # Which model restores: "gfpgan", or another with the same
        # tensors (chapter 6 switches to face_passthrough to measure the
        # orchestration alone).
        self.network = pipeline.parameter(args, "NETWORK", "gfpgan")

    async def execute(self, requests):
        # The requests of one call are independent: handle them
        # concurrently.
        answers = (self._respond(request) for request in requests)
        return list(await asyncio.gather(*answers))

    async def _respond(self, request):
        try:
            return await self._restore(request)
        except StepError as exc:
            error = pb_utils.TritonError(str(exc))
            return pb_utils.InferenceResponse(
                output_tensors=[], error=error
            )
        except Exception as exc:
            return pipeline.error_response(
                pb_utils, "face_restore_bls", exc
            )

    async def _call(self, model, inputs, outputs):
        request = pb_utils.InferenceRequest(
            model_name=model,
            inputs=inputs,
            requested_output_names=outputs,
        )
        response = await request.async_exec()
        if response.has_error():
            # The step's own message, which names the step when it is
            # ours.
            raise StepError(response.error().message())
        return [
            pb_utils.get_output_tensor_by_name(response, name)
            for name in outputs
        ]

    async def _restore(self, request):
        # One of the two inputs, whichever the client sent.
        given = []
        for name in ("ENCODED", "PIXELS"):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                given.append(tensor)
        image, faces, boxes = await self._call(
            "face_detect", given, ["IMAGE", "FACES", "BOXES"]
        )
        box_array = boxes.as_numpy()
        if len(box_array) == 0:
            # Early exit: no face, so neither the network nor
            # face_paste runs.
            pixels = image.as_numpy()
            text = pipeline.summary(pixels, box_array, faces.shape()[-1])
            return pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("RESTORED", pixels),
                    pb_utils.Tensor("BOXES", box_array),
                    pipeline.text_tensor(pb_utils, "SUMMARY", text),
                ]
            )

        # DLPack: a torch view of face_detect's output, without a copy
        # in this process, sliced into chunks, each handed to the
        # network as its input tensor.
        crops = torch.from_dlpack(faces.to_dlpack())
        calls = []
        for i in range(0, len(box_array), pipeline.NETWORK_BATCH):
            chunk = crops[i : i + pipeline.NETWORK_BATCH].contiguous()
            tensor = pb_utils.Tensor.from_dlpack("input__0", chunk)
            call = self._call(self.network, [tensor], ["output__0"])
            calls.append(call)
        answers = await asyncio.gather(*calls)
        restored = torch.cat(
            [torch.from_dlpack(out.to_dlpack()) for (out,) in answers]
        )
        pasted, summary = await self._call(
            "face_paste",
            [
                pb_utils.Tensor.from_dlpack("IMAGE", image.to_dlpack()),
                pb_utils.Tensor.from_dlpack("FACES", restored),
                pb_utils.Tensor.from_dlpack("BOXES", boxes.to_dlpack()),
            ],
            ["RESTORED", "SUMMARY"],
        )
        return pb_utils.InferenceResponse(
            output_tensors=[
                pasted,
                pb_utils.Tensor("BOXES", box_array),
                summary,
            ]
        )
