"""The book's GPU run: the checks of ../shared/GPU.md in one process, for a GPU machine.

    python -m booktools.gpu --out DIR [--deadline SECONDS]

Each section (environment, chapter 1's CUDA kernels, chapter 3's parity, chapters 13
and 6 served on GPU instances; chapter 13 was then part of chapter 5) records what it measured, or the error that stopped it,
in ``DIR/gpu_run.json``, which is rewritten after every section: a run cut short still
leaves what it finished. ``--deadline`` skips the sections that would start after it.
``python -m booktools.gpu --report FILE`` prints the tables of ``book/gpu.md`` from a
saved run. On a machine without CUDA the GPU sections record why they did not run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

STARTED = time.monotonic()
# --dry-run: the same code on the CPU with few samples, to check the script here
# before a GPU machine's minutes are spent on it.
DEVICE = "cuda"
DRY = False
# Chapter 6's three deployments of one pipeline.
DEPLOYMENTS = {
    "ensemble": "face_restore_ensemble",
    "BLS": "face_restore_bls",
    "one python model": "face_restore_python",
}


def _seconds() -> float:
    return round(time.monotonic() - STARTED, 1)


def _smi() -> dict:
    query = "name,driver_version,memory.total"
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                f"--query-gpu={query}",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)}
    name, driver, memory = [
        part.strip() for part in out.splitlines()[0].split(",")
    ]
    return {"name": name, "driver": driver, "memory": memory}


def environment() -> dict:
    import numpy
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "numpy": numpy.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cpu_threads": torch.get_num_threads(),
        "nvidia_smi": _smi(),
    }
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
        info["onnxruntime_providers"] = (
            onnxruntime.get_available_providers()
        )
    except ImportError as exc:
        info["onnxruntime"] = f"not importable: {exc}"
    return info


def _network():
    """Chapter 1 and 3's network: the random GFPGAN-256 (or the weights the
    environment names), its deploy wrapper and the portrait, on the CPU."""
    from tritonbook.gfpgan import (
        GFPGANForDeploy,
        gfpgan_from_environment,
    )
    from tritonbook.images import load_face, to_tensor

    net, description = gfpgan_from_environment()
    deploy = GFPGANForDeploy(net).eval()
    return net, deploy, to_tensor(load_face(net.out_size)), description


def custom_ops() -> dict:
    """Chapter 1: the extension built with its CUDA kernels; the parity grid (C++/CUDA
    op against its plain-PyTorch rewrite, forward and gradient) on the GPU in float32
    and float16, over the calls a GFPGAN forward makes."""
    import torch

    from tritonbook import cpp_ops, gfpgan

    started = time.perf_counter()
    cpp_ops.load_extension()
    info = cpp_ops.extension_info()
    result = {
        "build_s": round(time.perf_counter() - started, 1),
        "kernels": info["kernels"],
        "cuda": info["cuda"],
    }
    _, deploy, face, _ = _network()
    calls = {"fused_leaky_relu": [], "upfirdn2d": []}

    def record_activation(x, bias, negative_slope=0.2, scale=2**0.5):
        calls["fused_leaky_relu"].append(
            (tuple(x.shape), bias is not None, negative_slope, scale)
        )
        return gfpgan.fused_leaky_relu(x, bias, negative_slope, scale)

    def record_resample(x, kernel, up=1, down=1, pad=(0, 0)):
        calls["upfirdn2d"].append(
            (tuple(x.shape), tuple(kernel.shape), up, down, tuple(pad))
        )
        return gfpgan.upfirdn2d(x, kernel, up, down, pad)

    with (
        torch.no_grad(),
        gfpgan.use_ops(
            fused_leaky_relu=record_activation, upfirdn2d=record_resample
        ),
    ):
        deploy(face)
    rows = []
    if DEVICE in info["kernels"]:
        for dtype in (
            (torch.float32,) if DRY else (torch.float32, torch.float16)
        ):
            for op, case, ops, inputs, grads in cpp_ops.parity_cases(
                calls, DEVICE, dtype
            ):
                forward, backward = cpp_ops.largest_differences(
                    *ops, inputs, grads
                )
                forward_rel, backward_rel = cpp_ops.largest_differences(
                    *ops, inputs, grads, relative=True
                )
                rows.append(
                    {
                        "op": op,
                        "case": case,
                        "dtype": str(dtype)[6:],
                        "forward": forward,
                        "grad": backward,
                        "forward_rel": forward_rel,
                        "grad_rel": backward_rel,
                    }
                )
        # The whole network with the C++/CUDA ops against the plain ones, on the GPU.
        gpu = copy.deepcopy(deploy).to(DEVICE)
        with torch.no_grad():
            plain = gpu(face.to(DEVICE))
            with gfpgan.use_ops(
                fused_leaky_relu=cpp_ops.fused_leaky_relu_ext,
                upfirdn2d=cpp_ops.upfirdn2d_ext,
            ):
                ours = gpu(face.to(DEVICE))
        result["network_max_abs"] = float((ours - plain).abs().max())
    result["cases"] = rows
    summary = {}
    for row in rows:
        key = f"{row['op']} {row['dtype']}"
        entry = summary.setdefault(key, {"cases": 0})
        entry["cases"] += 1
        for column in ("forward", "grad", "forward_rel", "grad_rel"):
            entry[column] = max(entry.get(column, 0.0), row[column])
    result["summary"] = summary
    return result


def trace_parity() -> dict:
    """Chapter 3: on the GPU, the trace against eager with TF32 off and on, the GPU
    against the CPU; the traced file of the model repository loaded on the GPU."""
    import torch

    from tritonbook import repository
    from tritonbook.measure import parity

    torch.set_grad_enabled(False)
    _, deploy, face, description = _network()
    result = {"network": description}
    eager_cpu = deploy(face)
    rows = []
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    try:
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            # A copy: `deploy` stays on the CPU.
            gpu = copy.deepcopy(deploy).to(DEVICE).eval()
            gpu_face = face.to(DEVICE)
            traced = torch.jit.trace(gpu, (gpu_face,), check_trace=False)
            answers = [traced(gpu_face) for _ in range(3)]
            eager = gpu(gpu_face)
            for label, actual, expected in (
                ("traced vs eager, GPU", answers[-1], eager),
                ("eager GPU vs eager CPU", eager, eager_cpu),
            ):
                check = parity(actual, expected, rtol=1e-4, atol=1e-4)
                rows.append(
                    {
                        "tf32": tf32,
                        "compared": label,
                        "max_abs": check.max_abs,
                        "exceeding": check.n_exceeding,
                        "numel": check.numel,
                    }
                )
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
        ) = saved
    result["tf32"] = rows
    result["cudnn_tf32_default"] = saved[1]
    result["matmul_tf32_default"] = saved[0]
    # The repository's file, traced on the CPU with no device constant, moved whole.
    path = repository.REPOSITORY / "gfpgan" / "1" / "model.pt"
    repository.ensure_model_files(["gfpgan"])
    result["device_constants"] = repository.device_constants(path)
    loaded = torch.jit.load(str(path), map_location=DEVICE).eval()
    served = loaded(face.to(DEVICE))
    check = parity(served, eager_cpu, rtol=1e-4, atol=1e-4)
    result["file_on_gpu"] = {
        "device": str(served.device),
        "max_abs": check.max_abs,
        "exceeding": check.n_exceeding,
        "numel": check.numel,
    }
    return result


def aoti() -> dict:
    """Chapter 3's AOTInductor package, compiled for the GPU: eager, traced and the
    package on the same face, TF32 off (PyTorch's default for matrix products; cuDNN's
    convolutions are TF32 by default, set off here so that the three agree to float32)."""
    import tempfile

    import torch

    from tritonbook.gfpgan import use_ops
    from tritonbook.measure import parity, time_call

    torch.set_grad_enabled(False)
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        _, deploy, face, _ = _network()
        gpu = copy.deepcopy(deploy).to(DEVICE).eval()
        face = face.to(DEVICE)
        pair = torch.cat([face, face.flip(3)])
        eager = gpu(face)
        traced = torch.jit.trace(gpu, (face,), check_trace=False)
        batch = torch.export.Dim("batch", min=2, max=8)
        started = time.perf_counter()
        with (
            use_ops(fused_modconv=False),
            tempfile.TemporaryDirectory() as folder,
        ):
            program = torch.export.export(
                gpu, (pair,), dynamic_shapes=({0: batch},)
            )
            path = torch._inductor.aoti_compile_and_package(
                program, package_path=os.path.join(folder, "model.pt2")
            )
            compile_s = time.perf_counter() - started
            package = torch._inductor.aoti_load_package(path)
            packaged = package(face)
            calls = {
                "eager": lambda: gpu(face),
                "traced": lambda: traced(face),
                "AOTInductor": lambda: package(face),
            }
            times = {
                label: time_call(
                    call, label, repeats=3 if DRY else 50, warmup=3
                )
                for label, call in calls.items()
            }
        result = {"compile_s": round(compile_s, 1)}
        for label, answer in (
            ("traced", traced(face)),
            ("AOTInductor", packaged),
        ):
            check = parity(answer, eager, rtol=1e-4, atol=1e-4)
            result[f"{label} vs eager"] = {
                "max_abs": check.max_abs,
                "exceeding": check.n_exceeding,
            }
        result["median_ms"] = {
            label: statistics.median(t.seconds) * 1e3
            for label, t in times.items()
        }
        result["spread_ms"] = {
            label: [min(t.seconds) * 1e3, max(t.seconds) * 1e3]
            for label, t in times.items()
        }
        result["repeats"] = len(times["eager"].seconds)
        return result
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def _stub_numpy_probe(triton) -> dict:
    """One request to a python model: does the 24.10 stub (pybind11 2.x) work with
    the numpy it finds?"""
    import numpy as np

    from tritonbook.client import infer

    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    answers = {}
    for model, (given, taken) in {
        "affine_python": ("INPUT__0", "OUTPUT__0"),
        "affine_torchscript": ("input__0", "output__0"),
    }.items():
        triton.load(model)
        answers[model] = infer(
            triton, model, {given: x}, [taken], "grpc"
        )[taken].tolist()
    want = (2 * x + 1).tolist()  # both models compute 2x + 1
    answers["right"] = all(
        answers[m] == want
        for m in ("affine_python", "affine_torchscript")
    )
    return answers


def _timings(calls: dict, repeats: int) -> dict:
    from tritonbook.measure import time_call

    out = {}
    for label, call in calls.items():
        timing = time_call(
            call, label, repeats=repeats, warmup=1 if DRY else 3
        )
        seconds = sorted(timing.seconds)
        out[label] = {
            "median_ms": statistics.median(seconds) * 1e3,
            "min_ms": seconds[0] * 1e3,
            "max_ms": seconds[-1] * 1e3,
            "repeats": repeats,
        }
    return out


def _point(point) -> dict:
    return {
        "load": point.load,
        "stable": point.stable,
        "requests": point.requests,
        "infer_per_s": point.infer_per_s,
        "p50_ms": point.p50,
        "p95_ms": point.p95,
        "compute_infer_ms": point.compute_infer,
        "compute_input_ms": point.compute_input,
        "compute_output_ms": point.compute_output,
        "queue_ms": point.queue,
        "executions": point.executions,
        "inferences": point.inferences,
        "server_requests": point.server_requests,
        "execution_ms": point.execution_ms(),
    }


def _numpy_version(folder: str | None = None) -> str:
    """The numpy version in ``folder`` (its dist-info), or this process's."""
    if folder is None:
        import numpy

        return numpy.__version__
    found = sorted(Path(folder).glob("numpy-*.dist-info"))
    # numpy-1.26.4.dist-info
    return (
        found[0].name[len("numpy-") : -len(".dist-info")]
        if found
        else "unknown"
    )


def _embedded(result: dict):
    """The embedded server, started with a numpy its python stub can use.

    The 24.10 stub's pybind11 predates numpy 2: when one request to a python model
    comes back wrong with the machine's numpy, the server is restarted with the
    numpy 1.26 that ``TRITONBOOK_FALLBACK_NUMPY`` names, for the stub alone (a .pth
    file reads ``TRITONBOOK_STUB_NUMPY``; see book/gpu.md). Both probes are recorded
    in ``result``.
    """
    from tritonbook import repository, server

    # The probe's TorchScript model is generated, not committed.
    repository.ensure_model_files(["affine_torchscript"])
    triton = server.EmbeddedTriton()
    try:
        result["server"] = dict(triton.info().rows())
        try:
            probe = _stub_numpy_probe(triton)
        except Exception as exc:  # noqa: BLE001 (the answer decides the next step)
            probe = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
        # An earlier section of this process may have put numpy 1.26 first
        # for the stub already: say which numpy the probe ran with.
        chosen = os.environ.get("TRITONBOOK_STUB_NUMPY")
        result["stub_probe"] = {
            "numpy": chosen or "the client's",
            "numpy_version": _numpy_version(chosen),
            **probe,
        }
        fallback = os.environ.get("TRITONBOOK_FALLBACK_NUMPY")
        if not probe.get("right") and fallback:
            triton.stop()
            os.environ["TRITONBOOK_STUB_NUMPY"] = fallback
            triton = server.EmbeddedTriton()
            result["stub_probe_fallback"] = {
                "numpy": fallback,
                "numpy_version": _numpy_version(fallback),
                **_stub_numpy_probe(triton),
            }
    except BaseException:
        triton.stop()
        raise
    return triton


def served(deadline: float) -> dict:
    """Chapter 13 (then part of chapter 5) on the embedded server with GPU instances."""
    import numpy as np
    import torch

    from tritonbook import perf, repository
    from tritonbook.client import infer
    from tritonbook.images import load_face, to_tensor
    from tritonbook.measure import interleaved, time_call

    torch.set_grad_enabled(False)
    result = {}
    repository.ensure_model_files(
        [
            "gfpgan",
            "gfpgan_batched",
            "face_passthrough",
            "affine_torchscript",
        ]
    )
    triton = _embedded(result)
    try:
        for model in ("gfpgan", "gfpgan_batched"):
            triton.load(model)
        result["gfpgan_instances"] = (
            triton.http()
            .get_model_config("gfpgan")
            .get("instance_group")
        )
        size = repository.gfpgan_out_size(
            repository.REPOSITORY / "gfpgan" / "1" / "model.pt"
        )
        face = to_tensor(load_face(size))
        array = face.numpy()
        local = torch.jit.load(
            str(repository.REPOSITORY / "gfpgan" / "1" / "model.pt"),
            map_location=DEVICE,
        ).eval()

        def run_local():
            with torch.inference_mode():
                local(face.to(DEVICE)).cpu()

        def ask(protocol):
            return lambda: infer(
                triton,
                "gfpgan",
                {"input__0": array},
                ["output__0"],
                protocol,
            )

        answer = infer(
            triton, "gfpgan", {"input__0": array}, ["output__0"], "grpc"
        )
        with torch.inference_mode():
            want = local(face.to(DEVICE)).cpu().numpy()
        result["served_max_abs"] = float(
            np.abs(answer["output__0"] - want).max()
        )
        calls = {
            "local TorchScript": run_local,
            "Triton HTTP": ask("http"),
            "Triton gRPC": ask("grpc"),
        }
        result["latency"] = _timings(calls, repeats=1 if DRY else 30)

        def once(call):
            return lambda: (
                time_call(call, "", repeats=1, warmup=0).median
            )

        ratios = {}
        for protocol in ("HTTP", "gRPC"):
            ratio = interleaved(
                once(calls[f"Triton {protocol}"]),
                once(calls["local TorchScript"]),
                runs=2 if DRY else 10,
                label=f"Triton {protocol} / local",
            )
            ratios[protocol] = {
                "ratio": ratio.ratio,
                "interval": list(ratio.interval),
                "runs": len(ratio.a),
                "verdict": ratio.verdict,
            }
        result["served_over_local"] = ratios
        # Throughput: one instance without a batcher, then with one (max batch 8).
        sweeps = {}
        for model, levels in (
            ("gfpgan", [1, 2, 4]),
            ("gfpgan_batched", [1, 2, 4, 8]),
        ):
            if time.monotonic() > deadline:
                sweeps[model] = "skipped: deadline"
                continue
            points = perf.run(
                triton,
                model,
                {"input__0": array},
                batch=1,
                concurrency=levels[:1] if DRY else levels,
                window_requests=2 if DRY else 50,
                max_trials=2 if DRY else 10,
                percentile=None,
                timeout=150,
            )
            sweeps[model] = [_point(p) for p in points]
        result["gfpgan_sweeps"] = sweeps
    finally:
        triton.stop()
    return result


def _gfpgan_on_device():
    """The repository's gfpgan file loaded on DEVICE, and its face size (chapter 6's
    network; face_passthrough's file is built too, for the checks beside it)."""
    import torch

    from tritonbook import repository

    repository.ensure_model_files(["gfpgan", "face_passthrough"])
    model_pt = repository.REPOSITORY / "gfpgan" / "1" / "model.pt"
    size = repository.gfpgan_out_size(model_pt)
    return torch.jit.load(
        str(model_pt), map_location=DEVICE
    ).eval(), size


def pipeline_section(deadline: float) -> dict:
    """Chapter 6's three deployments of one picture, against the in-process script,
    with gfpgan on the GPU."""
    import torch

    torch.set_grad_enabled(False)
    network, size = _gfpgan_on_device()
    # Whether cuDNN may round float32 convolutions to TF32 here (PyTorch's
    # default: yes); book/gpu.md compares runs with it on and off.
    result = {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    triton = _embedded(result)
    try:
        result.update(_pipeline(triton, network, size))
    finally:
        triton.stop()
    return result


def _pipeline(triton, network, size) -> dict:
    import torch

    from tritonbook import pipeline
    from tritonbook.client import infer
    from tritonbook.images import load_face
    from tritonbook.measure import time_call

    deployments = DEPLOYMENTS
    for model in [
        "face_passthrough",
        "face_detect",
        "face_paste",
        *deployments.values(),
    ]:
        triton.load(model)
    import cv2

    from tritonbook.images import ASSETS

    portrait = load_face(256)
    cat = cv2.imread(str(ASSETS / "chelsea.png"))[:, :, ::-1]
    picture = pipeline.group_photo(1, portrait, cat)
    detector = pipeline.FaceDetector()

    def run_network(faces):
        with torch.inference_mode():
            return (
                network(torch.from_numpy(faces).to(DEVICE)).cpu().numpy()
            )

    reference = pipeline.restore(picture, detector, run_network, size)
    monolith = time_call(
        lambda: pipeline.restore(picture, detector, run_network, size),
        "monolith",
        repeats=1 if DRY else 20,
        warmup=1 if DRY else 3,
    )
    result = {
        "monolith_ms": statistics.median(monolith.seconds) * 1e3,
        "deployments": {},
    }
    for label, model in deployments.items():
        got = infer(
            triton,
            model,
            {"PIXELS": picture},
            ["RESTORED", "SUMMARY"],
            "grpc",
        )
        apart = pipeline.grey_levels_apart(got["RESTORED"], reference[0])
        entry = {"grey_levels_apart": apart}
        # One picture at a time, as chapter 6's rounds (perf_analyzer would need
        # data for the optional ENCODED input too).
        timing = time_call(
            lambda m=model: infer(
                triton, m, {"PIXELS": picture}, ["RESTORED"], "grpc"
            ),
            label,
            repeats=1 if DRY else 20,
            warmup=1 if DRY else 3,
        )
        entry["median_ms"] = statistics.median(timing.seconds) * 1e3
        entry["min_ms"] = min(timing.seconds) * 1e3
        entry["max_ms"] = max(timing.seconds) * 1e3
        result["deployments"][label] = entry
    result["steps"] = _pipeline_steps(
        triton, run_network, picture, reference
    )
    return result


def pipeline_load(deadline: float) -> dict:
    """Chapter 6's deployments under load, with gfpgan on the GPU: each against the
    in-process script in five interleaved rounds (one picture in flight, as the
    chapter's rounds), then each at 8 in flight with one, two and four instances of
    every python model."""
    import cv2
    import torch

    from tritonbook import loadgen, pipeline, repository
    from tritonbook.images import ASSETS, load_face
    from tritonbook.measure import round_robin, time_call

    torch.set_grad_enabled(False)
    network, size = _gfpgan_on_device()

    def run_network(faces):
        with torch.inference_mode():
            return (
                network(torch.from_numpy(faces).to(DEVICE)).cpu().numpy()
            )

    portrait = load_face(256)
    cat = cv2.imread(str(ASSETS / "chelsea.png"))[:, :, ::-1]
    pictures = {
        n: pipeline.group_photo(n, portrait, cat) for n in (0, 1)
    }
    detector = pipeline.FaceDetector()
    reference = pipeline.restore(
        pictures[1], detector, run_network, size
    )
    result = {}
    monolith = {
        n: time_call(
            lambda n=n: pipeline.restore(
                pictures[n], detector, run_network, size
            ),
            f"monolith, {n} faces",
            repeats=2 if DRY else 20,
            warmup=1 if DRY else 3,
        ).median
        for n in (0, 1)
    }
    result["monolith_ms"] = {n: s * 1e3 for n, s in monolith.items()}
    # What serving could gain at one picture in flight: the python steps around
    # the network (chapter 6's bound).
    result["bound"] = monolith[1] / (monolith[1] - monolith[0])
    triton = _embedded(result)
    try:
        for model in [
            "face_detect",
            "face_paste",
            *DEPLOYMENTS.values(),
        ]:
            triton.load(model)

        def measure(model, concurrency, min_requests):
            return loadgen.measure(
                triton,
                model,
                {"PIXELS": pictures[1]},
                ["RESTORED"],
                concurrency=concurrency,
                batch=1,
                protocol="grpc",
                expected={"RESTORED": reference[0]},
                # Served pictures come up to 3 grey levels from the script's
                # on a GPU at full width, 5 at half width (book/gpu.md, calls
                # 6, 7, 17 and 18): checked, not hidden.
                rtol=0,
                atol=6,
                min_requests=min_requests,
            )

        runs = {label: [] for label in DEPLOYMENTS}

        def pictures_per_second(label):
            def one_run():
                got = measure(DEPLOYMENTS[label], 1, 6 if DRY else 60)
                runs[label].append(_load_row(got))
                return got.throughput if got.stable else float("nan")

            return one_run

        def monolith_rate():
            restore = lambda: pipeline.restore(
                pictures[1], detector, run_network, size
            )
            seconds = time_call(
                restore, "monolith", repeats=2 if DRY else 20, warmup=0
            )
            runs.setdefault("monolith", []).append(
                {"median_ms": seconds.median * 1e3}
            )
            return 1 / seconds.median

        ratios = round_robin(
            {label: pictures_per_second(label) for label in DEPLOYMENTS},
            monolith_rate,
            rounds=1 if DRY else 5,
            label="{}, one face / monolith, pictures per s",
        )
        result["rounds"] = runs
        result["against_monolith"] = {
            label: {
                "ratio": r.ratio,
                "interval": list(r.interval),
                "runs": len(r.a),
                "verdict": r.verdict,
            }
            for label, r in ratios.items()
        }
        result["instances"] = {}
        for count in (1, 2) if DRY else (1, 2, 4):
            if time.monotonic() > deadline:
                break
            for model in DEPLOYMENTS.values():
                config = repository.read_config(model)
                if (
                    model != "face_restore_ensemble"
                ):  # it has no instances
                    config = repository.config_with_instances(
                        config, count
                    )
                triton.load(model, config)
            # After the deployments: loading an ensemble reloads its steps.
            for step in ("face_detect", "face_paste"):
                config = repository.read_config(step)
                triton.load(
                    step, repository.config_with_instances(config, count)
                )
            result["instances"][count] = {
                label: _load_row(measure(model, 8, 6 if DRY else 60))
                for label, model in DEPLOYMENTS.items()
            }
    finally:
        triton.stop()
    return result


def navigator_section(deadline: float) -> dict:
    """The Model Navigator appendix with the CUDA runners: SRCNN at x3 through each
    format, profiled (its torch runners cannot be on a CPU-only PyTorch), the folder
    it writes, and GFPGAN's default reference (autocast) against float32 eager."""
    import shutil
    import tempfile

    import model_navigator as nav
    import numpy as np
    import torch
    import yaml

    from tritonbook import navigator, srcnn
    from tritonbook.gfpgan import GFPGANForDeploy, build_gfpgan

    torch.set_grad_enabled(False)
    kind = "CPU" if DRY else "CUDA"
    target = nav.DeviceKind.CPU if DRY else nav.DeviceKind.CUDA
    runners = tuple(
        f"{name}{kind}"
        for name in (
            "Torch",
            "TorchScript",
            "Onnx",
            "TorchExportedProgram",
        )
    )
    workdir = Path(tempfile.mkdtemp(prefix="tritonbook-navigator-"))
    result = {"navigator": nav.__version__}
    try:
        static = srcnn.load_srcnn_checkpoint(
            srcnn.WEIGHTS_MULTISCALE, srcnn.SRCNNStatic(upscale_factor=3)
        ).to(DEVICE)
        g = torch.Generator().manual_seed(1)
        sizes = [
            (torch.rand(1, 3, s, s, generator=g) * 255).to(DEVICE)
            for s in (24, 32)
        ]
        with navigator.quiet(workdir / "srcnn.log"):
            package = nav.torch.optimize(
                model=static,
                dataloader=sizes,
                workspace=workdir / "srcnn",
                target_device=target,
                target_formats=(
                    nav.Format.TORCHSCRIPT,
                    nav.Format.ONNX,
                    nav.Format.TORCH_EXPORTEDPROGRAM,
                ),
                runners=runners,
                # Its own profiling, up to batch 64 (time on the lent machine).
                optimization_profile=nav.OptimizationProfile(
                    max_batch_size=2 if DRY else 64,
                    stability_percentage=100 if DRY else 10,
                ),
            )
        result["srcnn"] = navigator.summary(workdir / "srcnn")
        status = yaml.safe_load(
            (workdir / "srcnn" / "status.yaml").read_text()
        )
        result["srcnn_profiles"] = {
            f"{key} {runner}": [
                {
                    "batch": r["batch_size"],
                    "throughput": r["throughput"],
                    "p50_ms": r["p50_latency"],
                }
                for r in (
                    (
                        state.get("result", {}).get("Performance") or {}
                    ).get("profiling_results")
                    or []
                )
            ]
            for key, model in status["models_status"].items()
            for runner, state in model["runners_status"].items()
        }
        try:
            nav.triton.model_repository.add_model_from_package(
                workdir / "repository", "srcnn_x3_navigator", package
            )
            result["srcnn_config"] = (
                workdir
                / "repository"
                / "srcnn_x3_navigator"
                / "config.pbtxt"
            ).read_text()
        except Exception as exc:  # noqa: BLE001 (what it says is the result)
            result["srcnn_config"] = f"{type(exc).__name__}: {exc}"
        gfpgan = (
            GFPGANForDeploy(build_gfpgan(out_size=64, narrow=0.25))
            .eval()
            .to(DEVICE)
        )
        g = torch.Generator().manual_seed(0)
        faces = [
            (torch.rand(1, 3, 64, 64, generator=g) * 2 - 1).to(DEVICE)
            for _ in range(2)
        ]
        # Before the run: the navigator moves the model to the CPU afterwards.
        eager = [gfpgan(face).cpu().numpy() for face in faces]
        with navigator.quiet(workdir / "gfpgan.log"):
            nav.torch.optimize(
                model=gfpgan,
                dataloader=faces,
                workspace=workdir / "gfpgan",
                target_device=target,
                target_formats=(nav.Format.TORCHSCRIPT,),
                runners=(f"TorchScript{kind}",),
                batching=False,
                custom_configs=[
                    nav.TorchScriptConfig(jit_type=(nav.JitType.TRACE,))
                ],
            )
        result["gfpgan"] = navigator.summary(workdir / "gfpgan")
        saved = workdir / "gfpgan" / "model_output" / "correctness"
        result["gfpgan_reference_vs_float32"] = max(
            float(
                np.abs(
                    np.load(saved / f"{i}.npz")["output__0"] - e
                ).max()
            )
            for i, e in enumerate(eager)
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _load_row(got) -> dict:
    """One ``loadgen.measure`` result, as the saved run keeps it."""
    row = got.row()
    row.pop("model", None)
    return row


def _pipeline_steps(triton, run_network, picture, reference) -> dict:
    """Where a served picture departs from the script's: each step served alone,
    then BLS again, with its network and with face_passthrough (which returns its
    input)."""
    import numpy as np

    from tritonbook import pipeline, repository
    from tritonbook.client import infer

    apart = pipeline.grey_levels_apart
    detect = infer(
        triton,
        "face_detect",
        {"PIXELS": picture},
        ["IMAGE", "FACES", "BOXES"],
        "grpc",
    )
    image, faces, boxes = (
        detect["IMAGE"],
        detect["FACES"],
        detect["BOXES"],
    )
    local = run_network(faces)
    served = infer(triton, "gfpgan", {"input__0": faces}, ["output__0"])
    served = served["output__0"]
    pasted = infer(
        triton,
        "face_paste",
        {"IMAGE": image, "FACES": local, "BOXES": boxes},
        ["RESTORED"],
    )["RESTORED"]
    steps = {
        "network_served_vs_local_max_abs": float(
            np.abs(served - local).max()
        ),
        "paste_served_vs_local": apart(
            pasted, pipeline.paste_faces(image, local, boxes)
        ),
        "steps_with_served_network_vs_script": apart(
            pipeline.paste_faces(image, served, boxes), reference[0]
        ),
    }

    def bls_picture():
        return infer(
            triton, "face_restore_bls", {"PIXELS": picture}, ["RESTORED"]
        )["RESTORED"]

    steps["BLS, five calls"] = [
        apart(bls_picture(), reference[0]) for _ in range(5)
    ]
    config = repository.config_with_network(
        "face_restore_bls", "face_passthrough"
    )
    triton.load("face_restore_bls", config)
    try:
        unchanged = pipeline.paste_faces(image, faces, boxes)
        steps["BLS with face_passthrough vs the script's steps"] = apart(
            bls_picture(), unchanged
        )
    finally:
        triton.load("face_restore_bls")
    return steps


# Chapter 14, section 2 (then chapter 7, section 7): its small network on 64x64 tiles,
# one instance with no kind (Triton places it on the GPU), under each batcher setting.
TILE_BATCHERS = {
    "no batcher": None,
    "delay 0": {},
    "delay 2 ms": {"max_queue_delay_microseconds": 2000},
    "delay 10 ms": {"max_queue_delay_microseconds": 10000},
    "preferred 8, delay 10 ms": {
        "max_queue_delay_microseconds": 10000,
        "preferred_batch_size": [8],
    },
}
TILE_COMPARED = ("delay 2 ms", "preferred 8, delay 10 ms")


def _small_cnn():
    """Chapter 14's small network, traced as that chapter traces it."""
    import io

    import torch

    from tritonbook.production import small_cnn

    net = small_cnn()
    buffer = io.BytesIO()
    torch.jit.save(
        torch.jit.trace(net, torch.rand(1, 3, 64, 64)), buffer
    )
    dims = {"data_type": "TYPE_FP32", "dims": [3, -1, -1]}
    config = {
        "platform": "pytorch_libtorch",
        "max_batch_size": 16,
        "input": [{"name": "input__0", **dims}],
        "output": [{"name": "output__0", **dims}],
        "instance_group": [{"count": 1}],
    }
    return net, config, {"file:1/model.pt": buffer.getvalue()}


def batcher(deadline: float) -> dict:
    """Chapter 14's batcher settings at 8 requests in flight, then three interleaved
    rounds of two settings and no batcher, with the chapter's verdicts."""
    import numpy as np
    import torch

    from tritonbook import perf
    from tritonbook.client import infer
    from tritonbook.measure import Ratio

    torch.set_grad_enabled(False)
    net, config, files = _small_cnn()
    image = torch.rand(1, 3, 64, 64)
    tile = {"input__0": image.numpy()}
    want = net(image).numpy()
    result = {}
    triton = _embedded(result)
    try:
        names = {}
        for index, (label, setting) in enumerate(TILE_BATCHERS.items()):
            names[label] = f"tiles_{index}"
            given = dict(config, name=names[label])
            if setting is not None:
                given["dynamic_batching"] = setting
            triton.load(names[label], given, files=files)
        got = infer(
            triton, names["no batcher"], tile, ["output__0"], "grpc"
        )
        result["max_abs"] = float(np.abs(got["output__0"] - want).max())
        result["instances"] = (
            triton.http()
            .get_model_config(names["no batcher"])
            .get("instance_group")
        )

        def at_eight(label):
            return perf.run(
                triton,
                names[label],
                tile,
                batch=1,
                concurrency=[8],
                window_requests=5 if DRY else 100,
                stability=20,
                percentile=None,
                max_trials=3 if DRY else 20,
                timeout=120,
            )[0]

        # A dry run checks the code with two settings and one round.
        compared = TILE_COMPARED[:1] if DRY else TILE_COMPARED
        settings = (
            ["no batcher", *compared] if DRY else list(TILE_BATCHERS)
        )
        result["at_eight"] = {
            label: _point(at_eight(label)) for label in settings
        }
        taken = {label: [] for label in (*compared, "no batcher")}
        for _ in range(1 if DRY else 3):
            if time.monotonic() > deadline:
                break
            for label, points in taken.items():
                points.append(_point(at_eight(label)))
        result["rounds"] = taken
        verdicts = {}
        for label in compared:
            for column, key in (
                ("infer/s", "infer_per_s"),
                ("p95", "p95_ms"),
            ):
                ratio = Ratio(
                    f"{label} / no batcher, {column}",
                    tuple(p[key] for p in taken[label]),
                    tuple(p[key] for p in taken["no batcher"]),
                )
                verdicts[f"{label} / no batcher, {column}"] = {
                    "ratio": ratio.ratio,
                    "interval": list(ratio.interval),
                    "runs": len(ratio.a),
                    "verdict": ratio.verdict,
                }
        result["verdicts"] = verdicts
    finally:
        triton.stop()
    return result


def _table(header: list[str], rows: list[list]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += [
        "| " + " | ".join(str(cell) for cell in row) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def _g(x: float) -> str:
    """A difference: two significant digits, fixed where it reads well."""
    if x == 0:
        return "0"
    return f"{x:.2g}" if abs(x) >= 0.01 else f"{x:.1e}"


def report(record: dict) -> dict[str, str]:
    """The tables of book/gpu.md, by name, from a saved run (``gpu_run.json``)."""
    environments = [record["environment"]]
    environments += [
        record[k] for k in ("environment_2",) if k in record
    ]

    def calls(env):
        found = [
            str(run["run"])
            for run in record["runs"]
            if run.get("device", env["device"]) == env["device"]
        ]
        return "calls " + ", ".join(found)

    def row(label, value):
        return [label, *(value(env) for env in environments)]

    tables = {
        "environment": _table(
            ["", *(calls(env) for env in environments)],
            [
                row(
                    "GPU",
                    lambda e: (
                        f"{e['device']}, driver {e['nvidia_smi']['driver']}"
                    ),
                ),
                row("CPU threads (torch)", lambda e: e["cpu_threads"]),
                row("Python", lambda e: e["python"]),
                row(
                    "PyTorch",
                    lambda e: f"{e['torch']} (CUDA {e['torch_cuda']})",
                ),
                row("numpy (client)", lambda e: e["numpy"]),
                row(
                    "onnxruntime",
                    lambda e: (
                        f"{e['onnxruntime']}: {', '.join(e['onnxruntime_providers'])}"
                    ),
                ),
                row(
                    "Triton",
                    lambda e: (
                        f"{record['served']['server']['Triton version']}, embedded"
                    ),
                ),
            ],
        )
    }
    tables["runs"] = _table(
        ["call", "started", "GPU", "sections kept", "command"],
        [
            [
                run["run"],
                run["date"],
                run["device"].removeprefix("NVIDIA "),
                ", ".join(run["kept"]),
                f"`{run['command']}`",
            ]
            for run in record["runs"]
        ],
    )
    ops = record["custom_ops"]
    tables["custom_ops"] = _table(
        [
            "op",
            "dtype",
            "cases",
            "forward, abs",
            "gradient, abs",
            "forward, rel",
            "gradient, rel",
        ],
        [
            [
                key.split()[0],
                key.split()[1],
                v["cases"],
                _g(v["forward"]),
                _g(v["grad"]),
                _g(v["forward_rel"]),
                _g(v["grad_rel"]),
            ]
            for key, v in ops["summary"].items()
        ],
    )
    parity = record["trace_parity"]
    rows = [
        [
            "on" if r["tf32"] else "off",
            r["compared"],
            _g(r["max_abs"]),
            f"{r['exceeding']:,} of {r['numel']:,}",
        ]
        for r in parity["tf32"]
    ]
    on_gpu = parity["file_on_gpu"]
    rows.append(
        [
            "default",
            "repository's model.pt on cuda:0 vs eager CPU",
            _g(on_gpu["max_abs"]),
            f"{on_gpu['exceeding']:,} of {on_gpu['numel']:,}",
        ]
    )
    tables["trace_parity"] = _table(
        [
            "TF32",
            "compared",
            "largest difference",
            "values outside 1e-4",
        ],
        rows,
    )
    aot = record["aoti"]
    tables["aoti"] = _table(
        [
            "form",
            "median ms",
            "fastest, slowest ms",
            "largest difference from eager",
        ],
        [
            [
                label,
                f"{aot['median_ms'][label]:.1f}",
                ", ".join(f"{x:.1f}" for x in aot["spread_ms"][label]),
                ""
                if label == "eager"
                else _g(aot[f"{label} vs eager"]["max_abs"]),
            ]
            for label in ("eager", "traced", "AOTInductor")
        ],
    )
    served = record["served"]
    tables["builds"] = _table(
        ["built", "seconds"],
        [
            [
                "chapter 1's C++/CUDA extension (ninja, first build)",
                f"{ops['build_s']:.1f}",
            ],
            [
                "chapter 3's AOTInductor package for the GPU (batch 2 to 8)",
                f"{aot['compile_s']:.1f}",
            ],
        ],
    )
    probes = [
        (
            f"{served['stub_probe']['numpy_version']} (the machine's)",
            served["stub_probe"],
        )
    ]
    if "stub_probe_fallback" in served:
        fallback = served["stub_probe_fallback"]
        probes.append(
            (f"{fallback['numpy_version']} (carried)", fallback)
        )
    tables["stub_numpy"] = _table(
        ["numpy in the stub", "affine_python, 2x + 1 of [0, 1, 2, 3]"],
        [
            [label, probe.get("error") or probe["affine_python"][0]]
            for label, probe in probes
        ],
    )
    latency = served["latency"]
    tables["latency"] = _table(
        ["call", "median ms", "fastest ms", "slowest ms", "calls"],
        [
            [
                label,
                f"{v['median_ms']:.1f}",
                f"{v['min_ms']:.1f}",
                f"{v['max_ms']:.1f}",
                v["repeats"],
            ]
            for label, v in latency.items()
        ],
    )
    tables["served_over_local"] = _table(
        ["ratio", "mean", "95 % interval", "runs", "verdict"],
        [
            [
                f"Triton {p} / local",
                f"{v['ratio']:.2f}",
                f"{v['interval'][0]:.2f} to {v['interval'][1]:.2f}",
                v["runs"],
                v["verdict"],
            ]
            for p, v in served["served_over_local"].items()
        ],
    )
    rows = []
    for model, points in served["gfpgan_sweeps"].items():
        for q in points:
            batch = (
                q["inferences"] / q["executions"]
                if q["executions"]
                else float("nan")
            )
            rows.append(
                [
                    model,
                    q["load"],
                    f"{q['infer_per_s']:.1f}",
                    f"{q['p50_ms']:.1f}",
                    f"{q['p95_ms']:.1f}",
                    f"{q['compute_infer_ms']:.1f}",
                    f"{batch:.2f}",
                    f"{1e3 / q['compute_infer_ms'] * batch:.0f}",
                    q["requests"],
                    "yes" if q["stable"] else "no",
                ]
            )
    tables["throughput"] = _table(
        [
            "model",
            "in flight",
            "faces/s",
            "p50 ms",
            "p95 ms",
            "compute-infer ms per request",
            "mean batch",
            "bound faces/s",
            "requests",
            "stable",
        ],
        rows,
    )
    if "batcher" in record:
        tables.update(_batcher_tables(record["batcher"]))
    if "pipeline" in record:
        tables["pipeline"] = _pipeline_table(record["pipeline"])
    if "pipeline_steps" in record:
        tables["pipeline_checks"] = _pipeline_checks(record)
    if "pipeline_load" in record:
        tables.update(_pipeline_load_tables(record))
    if "navigator" in record:
        tables.update(_navigator_tables(record["navigator"]))
    return tables


def _navigator_tables(section: dict) -> dict[str, str]:
    """The Model Navigator appendix with the CUDA runners: what each format did, the
    navigator's own profiling of SRCNN, and the config it wrote."""
    rows = [
        [
            model,
            row["format"],
            row["runner"],
            row["export"],
            row["correctness"],
            row["profiling"],
            ""
            if row["largest difference"] is None
            else _g(row["largest difference"]),
        ]
        for model in ("srcnn", "gfpgan")
        for row in section[model]
    ]
    tables = {
        "navigator_formats": _table(
            [
                "model",
                "format",
                "runner",
                "export",
                "correctness",
                "profiling",
                "largest difference",
            ],
            rows,
        )
    }
    profiles = {
        key: {p["batch"]: p["throughput"] for p in points}
        for key, points in section["srcnn_profiles"].items()
        if points
    }
    batches = sorted({b for points in profiles.values() for b in points})
    tables["navigator_profiles"] = _table(
        ["batch", *(key.split()[0] for key in profiles)],
        [
            [
                b,
                *(
                    f"{points[b]:,.0f}" if b in points else ""
                    for points in profiles.values()
                ),
            ]
            for b in batches
        ],
    )
    tables["navigator_config"] = (
        "```text\n" + section["srcnn_config"].strip() + "\n```"
    )
    return tables


def _pipeline_load_tables(record: dict) -> dict[str, str]:
    """Chapter 6's deployments under load: the rounds against the script, and the
    instance counts at 8 in flight (with the earlier call's points beside them, when
    it was kept)."""
    section = record["pipeline_load"]
    rounds = section["rounds"]
    rows = [
        [
            "the script, in process (monolith)",
            ", ".join(
                f"{1e3 / r['median_ms']:.1f}" for r in rounds["monolith"]
            ),
            "",
            "",
            "",
        ]
    ]
    for label, ratio in section["against_monolith"].items():
        low, high = ratio["interval"]
        rows.append(
            [
                label,
                ", ".join(f"{r['infer/s']:.1f}" for r in rounds[label]),
                f"{ratio['ratio']:.2f}",
                f"{low:.2f} to {high:.2f}",
                ratio["verdict"],
            ]
        )
    tables = {
        "pipeline_rounds": _table(
            [
                "deployment",
                "pictures/s, rounds in order",
                "ratio to the monolith",
                "95 % interval",
                "verdict",
            ],
            rows,
        )
    }
    earlier = record.get("pipeline_load_first", {}).get("instances", {})
    first_call = record.get("pipeline_load_first", {}).get("run", "")
    this_call = section.get("run", "")
    rows = []
    for count, points in section["instances"].items():
        for label, q in points.items():
            before = earlier.get(count, {}).get(label)
            rows.append(
                [
                    label,
                    count,
                    f"{q['infer/s']:.1f}",
                    f"{before['infer/s']:.1f}" if before else "",
                    f"{q['median ms']:.0f}",
                    _g_ms(q["p95 ms"]),
                    # An ensemble has no instances: its steps queue and compute.
                    *(
                        ["", "", ""]
                        if "utilisation" not in q
                        else [
                            f"{q['server queue ms']:.0f}",
                            f"{q['server infer ms']:.1f}",
                            f"{q['utilisation']:.2f}",
                        ]
                    ),
                    q["requests"],
                    "yes" if q["stable"] else "no",
                ]
            )
    tables["pipeline_instances"] = _table(
        [
            "deployment",
            "instances",
            f"pictures/s, call {this_call}",
            f"pictures/s, call {first_call}",
            "p50 ms",
            "p95 ms",
            "queue ms",
            "compute-infer ms per request",
            "utilisation",
            "requests",
            "stable",
        ],
        rows,
    )
    return tables


def _g_ms(x: float) -> str:
    """A time in ms, or a dash where too few answers carried it (p95 needs 100)."""
    import math

    return "-" if math.isnan(x) else f"{x:.0f}"


def _pipeline_checks(record: dict) -> str:
    """Grey levels from the script's picture, for the runs that looked for the
    source of BLS's difference."""

    def levels(section):
        return ", ".join(
            f"{label} {v['grey_levels_apart']}"
            for label, v in section["deployments"].items()
        )

    tf32 = record["pipeline_tf32"]
    steps = record["pipeline_steps"]
    rows = [
        [
            tf32["run"],
            f"deployments, cuDNN TF32 {state}",
            levels(tf32[key]),
        ]
        for key, state in (("default", "on"), ("cudnn TF32 off", "off"))
    ]
    rows.append([steps["run"], "deployments", levels(steps)])

    def shown(value):
        if isinstance(value, list):
            return ", ".join(str(v) for v in value)
        return value

    rows += [
        [steps["run"], label, shown(steps[key])]
        for label, key in (
            ("BLS, five calls", "BLS, five calls"),
            (
                "BLS with face_passthrough (returns its input)",
                "BLS with face_passthrough vs the script's steps",
            ),
            (
                (
                    "gfpgan served vs in the client, on face_detect's crops "
                    "(largest difference, not grey levels)"
                ),
                "network_served_vs_local_max_abs",
            ),
            (
                (
                    "face_paste served vs in the client, same faces "
                    "(grey levels apart)"
                ),
                "paste_served_vs_local",
            ),
            (
                "face_detect's crops, gfpgan served, pasted in the client",
                "steps_with_served_network_vs_script",
            ),
        )
    ]
    return _table(["call", "what", "grey levels from the script"], rows)


def _batcher_tables(section: dict) -> dict[str, str]:
    rows = []
    for label, q in section["at_eight"].items():
        batch = q["inferences"] / q["executions"]
        rows.append(
            [
                label,
                f"{q['infer_per_s']:,.0f}",
                f"{q['p50_ms']:.2f}",
                f"{q['p95_ms']:.2f}",
                f"{q['queue_ms']:.2f}",
                f"{q['compute_infer_ms']:.2f}",
                f"{batch:.2f}",
                f"{1e3 / q['compute_infer_ms'] * batch:,.0f}",
                f"{q['requests']:,}",
                "yes" if q["stable"] else "no",
            ]
        )
    at_eight = _table(
        [
            "setting",
            "tiles/s",
            "p50 ms",
            "p95 ms",
            "queue ms",
            "compute-infer ms per request",
            "mean batch",
            "bound tiles/s",
            "requests",
            "stable",
        ],
        rows,
    )
    rounds = section["rounds"]
    verdicts = _table(
        ["ratio", "mean", "95 % interval", "runs", "verdict"],
        [
            [
                label,
                f"{v['ratio']:.2f}",
                f"{v['interval'][0]:.2f} to {v['interval'][1]:.2f}",
                v["runs"],
                v["verdict"],
            ]
            for label, v in section["verdicts"].items()
        ]
        + [
            [
                f"{label}, tiles/s in rounds 1 to {len(points)}",
                ", ".join(f"{p['infer_per_s']:,.0f}" for p in points),
                "",
                "",
                "",
            ]
            for label, points in rounds.items()
        ],
    )
    return {"batcher": at_eight, "batcher_verdicts": verdicts}


def _pipeline_table(section: dict) -> str:
    rows = [
        [
            "the script, in process (monolith)",
            f"{section['monolith_ms']:.1f}",
            "",
            "",
            "",
        ]
    ]
    for label, v in section["deployments"].items():
        rows.append(
            [
                label,
                f"{v['median_ms']:.1f}",
                f"{v['min_ms']:.1f}",
                f"{v['max_ms']:.1f}",
                v["grey_levels_apart"],
            ]
        )
    return _table(
        [
            "deployment",
            "median ms",
            "fastest ms",
            "slowest ms",
            "grey levels from the monolith",
        ],
        rows,
    )


SECTIONS = {
    "environment": lambda deadline: environment(),
    "custom_ops": lambda deadline: custom_ops(),
    "trace_parity": lambda deadline: trace_parity(),
    "served": served,
    "aoti": lambda deadline: aoti(),
    "batcher": batcher,
    "pipeline": pipeline_section,
    "pipeline_load": pipeline_load,
    "navigator": navigator_section,
}
NEEDS_CUDA = {
    "custom_ops",
    "trace_parity",
    "served",
    "aoti",
    "batcher",
    "pipeline",
    "pipeline_load",
    "navigator",
}


def run(
    out: Path, deadline_s: float, only: list[str] | None = None
) -> dict:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    deadline = STARTED + deadline_s
    record = {
        "command": " ".join(
            [
                Path(sys.executable).name,
                "-m",
                "booktools.gpu",
                *sys.argv[1:],
            ]
        ),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for name, section in SECTIONS.items():
        if only and name not in only:
            continue
        if (
            name in NEEDS_CUDA
            and not torch.cuda.is_available()
            and not DRY
        ):
            record[name] = {"skipped": "no CUDA device"}
        elif time.monotonic() > deadline:
            record[name] = {
                "skipped": f"deadline ({deadline_s:.0f} s) passed"
            }
        else:
            began = time.monotonic()
            print(f"[{_seconds():7.1f} s] {name} ...", flush=True)
            try:
                record[name] = section(deadline)
            except Exception as exc:  # noqa: BLE001 (recorded; the next section runs)
                record[name] = {
                    "error": f"{type(exc).__name__}: {exc}"[:4000],
                    "traceback": traceback.format_exc()[-4000:],
                }
                print(record[name]["traceback"], flush=True)
            record[name]["section_s"] = round(
                time.monotonic() - began, 1
            )
        (out / "gpu_run.json").write_text(
            json.dumps(record, indent=1, default=str) + "\n"
        )
        print(
            f"[{_seconds():7.1f} s] {name}: {json.dumps(record[name], default=str)[:600]}",
            flush=True,
        )
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-run"))
    parser.add_argument(
        "--deadline",
        type=float,
        default=420.0,
        help="start no section after this many seconds",
    )
    parser.add_argument(
        "--only", nargs="*", help="the sections to run (default: all)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="on the CPU, few samples: checks the script, measures nothing",
    )
    parser.add_argument(
        "--report", type=Path, help="print the tables of a saved run"
    )
    args = parser.parse_args(argv)
    if args.report:
        for name, table in report(
            json.loads(args.report.read_text())
        ).items():
            print(f"<!-- {name} -->\n{table}\n")
        return
    if args.dry_run:
        global DEVICE, DRY
        DEVICE, DRY = "cpu", True
    run(args.out, args.deadline, args.only)


if __name__ == "__main__":
    main()
