"""The book's model repository: where it is, and building the model files it does not commit.

Configs (``config.pbtxt``) and python models are committed. Model files (TorchScript,
ONNX) are generated: each has a builder here, so any chapter, test or reader can call
``ensure_model_files()`` and get a repository that loads, without running the chapters
that produce the files first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# The committed repository, beside the package. server imports this module (for the
# default repository and read_config); nothing here imports server.
REPOSITORY = Path(__file__).resolve().parent.parent / "model_repository"


def build_affine_torchscript(path: Path) -> None:
    """y = 2x + 1 as a TorchScript file (the environment chapter's libtorch model)."""
    import torch

    class Affine(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * x + 1

    with warnings.catch_warnings():
        # torch.jit is deprecated in PyTorch 2.13; chapter 3 discusses it and the
        # modern path. The libtorch backend still serves TorchScript only.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Affine()), str(path))


def half_demo_net():
    """Chapter 11's network: two seeded 3x3 convolutions, float32, in eval mode."""
    import torch

    torch.manual_seed(11)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 3, 3, padding=1)).eval()


def _save_trace(module, example, path: Path) -> None:
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        # torch.jit is deprecated in PyTorch 2.13 (chapter 3); the libtorch backend
        # still serves TorchScript only.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(module, example), str(path))


def build_half_torchscript(path: Path) -> None:
    """half_demo_net in float16, traced: FP16 in and out."""
    import torch

    _save_trace(half_demo_net().half(), torch.rand(1, 3, 16, 16).half(), path)


def build_half_wrapped_torchscript(path: Path) -> None:
    """half_demo_net in float16 inside a wrapper that takes and returns float32."""
    import torch

    class HalfInside(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = half_demo_net().half()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x.half()).float()

    _save_trace(HalfInside().eval(), torch.rand(1, 3, 16, 16), path)


def build_affine_onnx(path: Path) -> None:
    """y = 2x + 1 as an ONNX graph with a dynamic batch dimension."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes=[
            helper.make_node("Mul", ["x", "two"], ["twice"]),
            helper.make_node("Add", ["twice", "one"], ["y"]),
        ],
        name="affine",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    # Opset 17 and IR 8 load in every onnxruntime the book meets, old containers too.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def build_gfpgan_torchscript(path: Path) -> None:
    """GFPGANv1 traced for serving: the steps of chapters 2 and 3 in one
    function.

    The network is the real one when its checkpoint is available
    (``$GFPGAN_WEIGHTS`` or ``assets/GFPGANv1.pth``), else the seeded
    random stand-in; which one is written into the file as
    ``extra/tritonbook.txt``. The trace is of ``GFPGANForDeploy``
    (inference options fixed) with the batch-agnostic modulated
    convolution, checked at a second batch size before it is saved.
    """
    import torch

    from tritonbook.gfpgan import (
        GFPGANForDeploy,
        gfpgan_from_environment,
        use_ops,
    )
    from tritonbook.images import load_face, to_tensor

    net, description = gfpgan_from_environment()
    deploy = GFPGANForDeploy(net).eval()
    face = to_tensor(load_face(net.out_size))
    with (
        warnings.catch_warnings(),
        torch.no_grad(),
        use_ops(fused_modconv=False),
    ):
        warnings.simplefilter("ignore", DeprecationWarning)
        # The channel split in the SFT layers is a constant of the
        # architecture.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(deploy, face, check_trace=False)
        pair = torch.cat([face, face.flip(3)])
        torch.testing.assert_close(
            traced(pair), deploy(pair), rtol=1e-4, atol=1e-4
        )
        torch.jit.save(
            traced,
            str(path),
            _extra_files={"tritonbook.txt": description},
        )


def _gfpgan_deploy_examples():
    """The environment's GFPGAN in its deploy wrapper, one face, and that face with its mirror."""
    import torch

    from tritonbook.gfpgan import GFPGANForDeploy, gfpgan_from_environment
    from tritonbook.images import load_face, to_tensor

    net, _ = gfpgan_from_environment()
    face = to_tensor(load_face(net.out_size))
    return GFPGANForDeploy(net).eval(), face, torch.cat([face, face.flip(3)])


def build_gfpgan_aoti(path: Path) -> None:
    """GFPGANv1 as an AOTInductor package (``model.pt2``) for ``platform: "torch_aoti"``.

    The same network and batch-agnostic form as ``build_gfpgan_torchscript``, exported
    with a dynamic batch dimension and compiled ahead of time for this machine's CPU by
    this torch (chapter 3). Needs a C++ compiler; takes a minute or more on two cores.
    """
    import torch

    from tritonbook import aoti
    from tritonbook.gfpgan import use_ops

    deploy, face, pair = _gfpgan_deploy_examples()
    # Exactly chapter 3's program (its "shared_form"), so that after the chapter this
    # build is a copy from tritonbook.aoti's cache, not a second compile.
    batch = torch.export.Dim("batch", min=1, max=8)
    with torch.no_grad(), use_ops(fused_modconv=False), tempfile.TemporaryDirectory() as folder:
        program = torch.export.export(deploy, (pair,), dynamic_shapes=({0: batch},))
        # The package's name must end in .pt2; ensure_model_files hands us a .partial name.
        package_path = os.path.join(folder, "model.pt2")
        aoti.compile_package(program, package_path)
        package = torch._inductor.aoti_load_package(package_path)
        torch.testing.assert_close(package(face), deploy(face), rtol=1e-4, atol=1e-3)
        shutil.move(package_path, path)


def build_gfpgan_onnx(path: Path) -> None:
    """GFPGANv1 as ONNX (``model.onnx``) for the onnxruntime backend (chapter 3).

    The same network and batch-agnostic form as ``build_gfpgan_torchscript``, through the
    dynamo exporter with a dynamic batch dimension. The weights are stored inside the
    file (under the 2 GiB limit of one protobuf); checked at batch 1 with onnxruntime.
    """
    import logging

    import onnxruntime as ort
    import torch

    from tritonbook.gfpgan import use_ops

    # The exporter logs that torchvision's operators are not registered: not used here.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    deploy, face, pair = _gfpgan_deploy_examples()
    batch = torch.export.Dim("batch", min=1, max=8)
    with warnings.catch_warnings(), torch.no_grad(), use_ops(fused_modconv=False):
        warnings.simplefilter("ignore")
        torch.onnx.export(deploy, (pair,), str(path), dynamo=True, external_data=False,
                          dynamic_shapes=({0: batch},), input_names=["input"],
                          output_names=["output"], verbose=False)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        [output] = session.run(None, {"input": face.numpy()})
        torch.testing.assert_close(torch.from_numpy(output), deploy(face), rtol=1e-4, atol=1e-3)


def build_srcnn_onnx(path: Path, weights: Path | None = None) -> None:
    """SRCNN with a dynamic factor as ONNX: the modern path of chapter 4.

    The multi-scale weights from ``assets/`` (or ``weights``), the
    ``tritonbook::resize_bicubic`` custom operator translated to an ONNX
    ``Resize`` whose ``scales`` is the graph input ``factor``, and
    dynamic image height and width. One file, no external data.
    """
    import logging

    import torch

    from tritonbook import srcnn

    # The exporter logs that torchvision's operators are not
    # registered: not used here.
    logging.getLogger(
        "torch.onnx._internal.exporter._registration"
    ).setLevel(logging.ERROR)
    model = srcnn.load_srcnn_checkpoint(
        weights or srcnn.WEIGHTS_MULTISCALE, srcnn.SRCNNCustomOp()
    )
    example = torch.zeros(1, 3, 32, 48)
    height = torch.export.Dim("height", min=4)
    width = torch.export.Dim("width", min=4)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example, srcnn.scales_tensor(3)),
            str(path),
            dynamo=True,
            custom_translation_table=srcnn.TRANSLATION_TABLE,
            external_data=False,
            dynamic_shapes=({2: height, 3: width}, None),
            input_names=["input", "factor"],
            output_names=["output"],
            verbose=False,
        )


def build_face_passthrough(path: Path) -> None:
    """A TorchScript network that returns a copy of its input (chapter 6's zero-cost network)."""
    import torch

    class Passthrough(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Passthrough()), str(path))


def build_srcnn_x3_onnx(path: Path) -> None:
    """The same dynamic SRCNN export, from the weights trained at x3 only (an older model)."""
    from tritonbook import srcnn

    build_srcnn_onnx(path, weights=srcnn.WEIGHTS_X3)


def link_to(model: str, relative: str) -> Callable[[Path], None]:
    """A builder that makes a model file a relative link to another model's file.

    Several configs can serve one network (chapter 5 serves GFPGAN three ways):
    they share one file instead of copies of 275 MiB. The link is relative and stays
    inside the repository, so it also resolves in the container, which mounts the
    repository folder. The other model's file is built first when missing.
    """

    def build(path: Path) -> None:
        # path is <repository>/<this model>/<version>/<file>(.partial)
        repository = path.parents[2]
        ensure_model_files([model], repository)
        target = repository / model / relative
        path.symlink_to(os.path.relpath(target, path.parent))

    build.target = (model, relative)  # what the link points to, for readers and tests
    return build


# model name -> [(file inside the model folder, builder), ...]
BUILDERS: dict[str, list[tuple[str, Callable[[Path], None]]]] = {
    "affine_torchscript": [("1/model.pt", build_affine_torchscript)],
    "affine_onnx": [("1/model.onnx", build_affine_onnx)],
    "gfpgan": [("1/model.pt", build_gfpgan_torchscript)],
    "gfpgan_aoti": [("1/model.pt2", build_gfpgan_aoti)],
    "gfpgan_onnx": [("1/model.onnx", build_gfpgan_onnx)],
    "gfpgan_static": [("1/model.pt", link_to("gfpgan", "1/model.pt"))],
    "gfpgan_batched": [("1/model.pt", link_to("gfpgan", "1/model.pt"))],
    "srcnn": [("1/model.onnx", build_srcnn_onnx)],
    "face_passthrough": [("1/model.pt", build_face_passthrough)],
    "half_torchscript": [("1/model.pt", build_half_torchscript)],
    "half_wrapped_torchscript": [("1/model.pt", build_half_wrapped_torchscript)],
    # Two versions of one model: x3-only weights (1), then multi-scale weights (2).
    "srcnn_versions": [("1/model.onnx", build_srcnn_x3_onnx), ("2/model.onnx", build_srcnn_onnx)],
}


def pack_python_environment(archive: str | os.PathLike, modules: dict[str, str],
                            packages: Iterable[str] = ("numpy",)) -> Path:
    """A Python environment for a python model's ``EXECUTION_ENV_PATH``, packed as
    ``archive`` (``.tar.gz``), and its path.

    The environment is a venv of the Python that runs this code, made without pip so that
    nothing is downloaded: ``packages`` (distribution names) are copied from this Python's
    site-packages, file by file as their metadata lists them, and each of ``modules``
    (name -> source) is written as ``name.py``. numpy is the default because the python
    backend's ``triton_python_backend_utils`` imports it and a venv does not see its base
    Python's packages. The archive holds ``bin/activate``, which the 24.10 backend (the
    embedded server) sources before it starts the stub; venv's script names the folder it
    was made in, so it is rewritten to find its folder from its own location (bash only,
    as that backend runs it). From 25.08 the backend only checks that the script exists
    and sets ``VIRTUAL_ENV`` and ``PATH`` itself: the rewrite is harmless there.

    A venv names its base Python by absolute path (``home`` in ``pyvenv.cfg``; ``bin/python``
    is a link to it), so the archive serves where that Python exists: on this machine, the
    embedded server. For another machine or a container, build the environment there, with
    the Python of the server's stub, or pack a conda environment with conda-pack, which
    carries its own interpreter.
    """
    from importlib import metadata

    archive = Path(archive)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory(prefix="tritonbook-env-") as scratch:
        env = Path(scratch) / "env"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
        # venv writes its own folder into bin/activate by absolute path. Unpacked
        # elsewhere, that script would put a missing folder on PATH, and the stub, which
        # finds its prefix through the first python3 on PATH, would run the base Python
        # without the environment's packages. The 24.10 backend sources the script with bash,
        # so it can find its folder from its own location instead, as conda-pack's does.
        activate = env / "bin" / "activate"
        here = '$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)'
        activate.write_text(activate.read_text().replace(str(env), here))
        site = env / "lib" / version / "site-packages"
        for name in packages:
            distribution = metadata.distribution(name)
            for file in distribution.files or []:
                source = Path(distribution.locate_file(file))
                if source.is_file() and not file.parts[0].startswith(".."):
                    target = site / file
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target)
        for name, source in modules.items():
            (site / f"{name}.py").write_text(source)
        archive.parent.mkdir(parents=True, exist_ok=True)
        # Level 1: the archive is packed once and read once; smaller buys little.
        with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
            tar.add(env, arcname=".")
    return archive


def model_names(repository: str | os.PathLike = REPOSITORY) -> list[str]:
    """Every model folder (one with a config.pbtxt) in the repository."""
    return sorted(p.parent.name for p in Path(repository).glob("*/config.pbtxt"))


PACKAGE = Path(__file__).resolve().parent
ASSETS = PACKAGE.parent / "assets"
# The libraries that write or check a model file.
WRITERS = ("torch", "onnx", "onnxscript", "onnxruntime")


def inputs_key() -> str:
    """What every generated model file is a function of, as one hash: the package's code
    (the builders and the networks they build, C++ ops included), the assets (the face a
    trace is checked on, the SRCNN weights, a GFPGAN checkpoint by size and time), the
    checkpoint ``$GFPGAN_WEIGHTS`` names, and the versions of the libraries that write the
    files. Coarse on purpose: any change to the package rebuilds the files once."""
    from importlib import metadata

    digest = hashlib.sha256()
    for source in sorted(PACKAGE.rglob("*")):
        if source.suffix in (".py", ".cpp", ".cu", ".h") and "__pycache__" not in source.parts:
            digest.update(source.relative_to(PACKAGE).as_posix().encode() + b"\0")
            digest.update(source.read_bytes())
    named = os.environ.get("GFPGAN_WEIGHTS", "").strip()
    checkpoints = [Path(named)] if named else []
    for asset in sorted(ASSETS.glob("*")) + checkpoints:
        if not asset.is_file():
            digest.update(f"{asset}: none\0".encode())
        elif asset.suffix == ".pth" and asset.stat().st_size > 2**24:
            stat = asset.stat()  # a 300 MiB checkpoint: not read at every check
            digest.update(f"{asset}: {stat.st_size} {stat.st_mtime_ns}\0".encode())
        else:
            digest.update(asset.name.encode() + b"\0" + asset.read_bytes())
    for name in WRITERS:
        try:
            digest.update(f"{name}=={metadata.version(name)}\0".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}: none\0".encode())
    return digest.hexdigest()


def _record_path(path: Path) -> Path:
    # Beside the file, hidden: Triton and the backends read only the files they name.
    return path.with_name(f".{path.name}.built.json")


def _up_to_date(path: Path, key: str) -> bool:
    """The file exists and was last built by this package from these inputs (and has
    not been replaced since)."""
    try:
        record = json.loads(_record_path(path).read_text())
        stat = path.lstat()
    except (OSError, ValueError):
        return False
    return path.exists() and record.get("key") == key and record.get("file") == [
        stat.st_size, stat.st_mtime_ns]


@dataclass(frozen=True)
class Build:
    """One generated model file, and whether and how long it was built this time."""

    path: Path
    seconds: float | None  # None: up to date, not built

    def __str__(self) -> str:
        if self.seconds is None:
            return "up to date (built earlier from the same code and inputs)"
        return f"built in {self.seconds:.1f} s"


def ensure_model_files(
    models: Iterable[str] | None = None,
    repository: str | os.PathLike = REPOSITORY,
    rebuild: bool = False,
) -> list[Path]:
    """Build every generated model file (or the named models') that is missing or was
    built from other code or inputs (``inputs_key``); return what was built."""
    return [build.path for build in _builds(models, repository, rebuild)
            if build.seconds is not None]


def build_shown(models: Iterable[str]) -> list[Build]:
    """The named models' files, for a cell whose lesson is the build: rebuilt and timed
    every time in the full profile (the committed run shows a real build), rebuilt in the
    quick profile only when out of date, so that CI's second notebook pass reuses what
    its first built (``tritonbook.profile``)."""
    from tritonbook import profile

    return _builds(models, REPOSITORY, profile.current().rebuild_shown_builds)


def _builds(models, repository, rebuild: bool) -> list[Build]:
    repository = Path(repository)
    key = inputs_key()
    builds = []
    for model in BUILDERS if models is None else models:
        for relative, builder in BUILDERS.get(model, ()):  # none: a python model, an ensemble
            path = repository / model / relative
            if not rebuild and _up_to_date(path, key):
                builds.append(Build(path, None))
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            # Per process: two test workers may build the same file at once.
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.unlink(missing_ok=True)
            started = time.perf_counter()
            builder(partial)
            seconds = time.perf_counter() - started
            partial.replace(path)  # never leave a half-written model file behind
            stat = path.lstat()
            record = _record_path(path).with_suffix(f".{os.getpid()}.partial")
            record.write_text(json.dumps({"key": key, "seconds": round(seconds, 1),
                                          "file": [stat.st_size, stat.st_mtime_ns]}))
            record.replace(_record_path(path))
            builds.append(Build(path, seconds))
    return builds


def export(
    models: Iterable[str],
    destination: str | os.PathLike,
    repository: str | os.PathLike = REPOSITORY,
) -> list[str]:
    """Copy the named model folders into a new repository, for a server that loads them all.

    This is how a volume for ``--model-control-mode=none`` is filled
    (``deploy/kubernetes/triton.yaml``): such a server loads every folder it finds at
    start, and by default exits if one fails, so the volume holds exactly the models to
    serve. Missing model files are built first; links are copied as the files they point
    to (``gfpgan_batched`` shares ``gfpgan``'s file here, but a volume filled with
    ``cp -r`` would hold dangling links). An ensemble's steps must be in the list too:
    BLS callees cannot be read from a config, so name those yourself.
    """
    repository, destination = Path(repository), Path(destination)
    models = list(dict.fromkeys(models))
    known = model_names(repository)
    unknown = [m for m in models if m not in known]
    if not models or unknown:
        raise ValueError(f"name models to export from {repository}; unknown: {unknown}, known: {known}")
    for model in models:
        config = read_config(model, repository)
        steps = [s["model_name"] for s in config.get("ensemble_scheduling", {}).get("step", [])]
        missing = [step for step in steps if step not in models]
        if missing:
            raise ValueError(f"ensemble {model!r} calls {missing}: add them to the list")
    if destination.exists() and any(destination.iterdir()):
        raise FileExistsError(f"{destination} is not empty: export into a new or empty folder")
    ensure_model_files(models, repository)
    destination.mkdir(parents=True, exist_ok=True)
    for model in models:
        shutil.copytree(
            repository / model,
            destination / model,
            symlinks=False,  # a link is copied as the file it points to
            ignore=shutil.ignore_patterns("__pycache__", "*.partial", ".*.built.json"),
        )
    return models


def read_config(model: str, repository: str | os.PathLike = REPOSITORY) -> dict:
    """A model's config.pbtxt, parsed with Triton's own schema, in the JSON form that the
    server reports and the load API accepts (64-bit numbers as numbers, not strings)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    text = (Path(repository) / model / "config.pbtxt").read_text()
    message = text_format.Parse(text, model_config_pb2.ModelConfig())
    config = json_format.MessageToDict(message, preserving_proto_field_name=True)
    _int64_as_numbers(config, message.DESCRIPTOR)
    return config


def write_folder(destination: str | os.PathLike, config: dict, files: dict[str, bytes]) -> Path:
    """A model given as the load API takes it (``Triton.load``: a JSON config with its
    name, and ``"file:<path>"`` contents) written as a model folder in ``destination``:
    ``config.pbtxt`` in Triton's text format, and the files. For tools that read a
    repository, such as Model Analyzer (chapter 14)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    message = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    folder = Path(destination) / message.name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(message))
    for key, data in files.items():
        if not key.startswith("file:"):
            raise ValueError(f"file keys start with 'file:', as the load API's do: {key!r}")
        path = folder / key.removeprefix("file:")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def config_diff(model_a: str, model_b: str, repository: str | os.PathLike = REPOSITORY) -> str:
    """The lines that differ between two models' ``config.pbtxt``, comments and blank
    lines left out, as a unified diff with no context."""
    import difflib

    def code_lines(model: str) -> list[str]:
        text = (Path(repository) / model / "config.pbtxt").read_text()
        return [line for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]

    return "\n".join(difflib.unified_diff(code_lines(model_a), code_lines(model_b),
                                          model_a, model_b, lineterm="", n=0))


def config_with_network(model: str, network: str) -> dict:
    """A chapter 6 deployment's committed config, calling another restoring network:
    the ensemble's ``gfpgan`` step, or the python models' ``NETWORK`` parameter."""
    config = read_config(model)
    if config.get("platform") == "ensemble":
        for step in config["ensemble_scheduling"]["step"]:
            if step["model_name"] == "gfpgan":
                step["model_name"] = network
    else:
        config["parameters"]["NETWORK"] = {"string_value": network}
    return config


def config_with_instances(config: dict, count: int, threads: int | None = None) -> dict:
    """``config`` with ``count`` instances in its first instance group. Only the count
    changes: the kind, and so the device, stay those of the config. ``threads``: each
    instance's thread pools, as the ``THREADS`` parameter that chapter 6's python
    models read (``pipeline.use_threads``)."""
    changed = dict(config, instance_group=[dict(config["instance_group"][0], count=count)])
    if threads is not None:
        parameters = dict(config.get("parameters", {}))
        parameters["THREADS"] = {"string_value": str(threads)}
        changed["parameters"] = parameters
    return changed


def _int64_as_numbers(data: dict, descriptor) -> None:
    """Protobuf's JSON writes 64-bit integers as strings; make them numbers again."""
    from google.protobuf.descriptor import FieldDescriptor as F

    wide = {F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64}
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name["value"]
            for key in value:
                if entry.message_type is not None:
                    _int64_as_numbers(value[key], entry.message_type)
                elif entry.type in wide:
                    value[key] = int(value[key])
        elif field.message_type is not None:
            for item in value if field.is_repeated else [value]:
                _int64_as_numbers(item, field.message_type)
        elif field.type in wide:
            data[field.name] = [int(v) for v in value] if field.is_repeated else int(value)


def gfpgan_out_size(path: str | os.PathLike) -> int:
    """The image size a GFPGAN TorchScript file was traced for (from its description)."""
    import re
    import zipfile

    # A TorchScript file is a zip archive; extra files sit in <archive>/extra/.
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith("/extra/tritonbook.txt")]
        text = archive.read(names[0]).decode() if names else ""
    found = re.search(r"out_size=(\d+)", text)
    if found is None:
        raise ValueError(f"{path} has no tritonbook description; rebuild it with ensure_model_files")
    return int(found.group(1))


def device_constants(path: str | os.PathLike) -> list[str]:
    """The lines of a TorchScript file's code that name a fixed device.

    A TorchScript file is a zip archive whose ``code/`` folder holds the recorded
    program as Python-like text. ``torch.jit.trace`` writes any ``.to(x)`` or
    ``device=x.device`` it ran as a constant such as ``torch.device("cpu")``.
    ``map_location`` moves weights, not such constants, so a file with any of these
    lines keeps part of its work on the device it was traced on (chapter 3).
    Each line is returned as ``<file in the archive>: <line>``.
    """
    import re
    import zipfile

    pattern = re.compile(r"torch\.device\(|\bdevice=")
    found = []
    with zipfile.ZipFile(path) as archive:
        for name in sorted(archive.namelist()):
            if "/code/" not in name or not name.endswith(".py"):
                continue
            for line in archive.read(name).decode().splitlines():
                if pattern.search(line):
                    found.append(f"{name.split('/code/', 1)[1]}: {line.strip()}")
    return found


def tree(repository: str | os.PathLike = REPOSITORY, models: Iterable[str] | None = None) -> str:
    """The repository as Triton reads it: model folders, their config and version folders.

    Files show their size; links show where they point. ``models`` limits the listing.
    """
    repository = Path(repository)
    wanted = model_names(repository) if models is None else list(models)
    lines = [f"{repository.name}/"]

    def walk(folder: Path, prefix: str) -> None:
        entries = sorted(p for p in folder.iterdir() if p.name != "__pycache__"
                         and not p.name.endswith((".partial", ".built.json")))
        for i, entry in enumerate(entries):
            last = i == len(entries) - 1
            branch, extension = ("└── ", "    ") if last else ("├── ", "│   ")
            if entry.is_symlink():
                lines.append(f"{prefix}{branch}{entry.name} -> {os.readlink(entry)}")
            elif entry.is_dir():
                lines.append(f"{prefix}{branch}{entry.name}/")
                walk(entry, prefix + extension)
            else:
                lines.append(f"{prefix}{branch}{entry.name}  ({_size(entry.stat().st_size)})")

    for i, model in enumerate(wanted):
        last = i == len(wanted) - 1
        lines.append(f"{'└── ' if last else '├── '}{model}/")
        walk(repository / model, "    " if last else "│   ")
    return "\n".join(lines)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024**2:.1f} MiB"


def _main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tritonbook.repository",
        description="build: the generated model files that are missing (all, or the named "
        "models'), so that a chapter can start without the chapters before it. export: "
        "copy model folders (links resolved, missing files built) into a new repository.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build missing model files")
    build.add_argument("models", nargs="*", help="default: every model with generated files")
    copy = commands.add_parser("export", help="copy model folders into a new repository")
    copy.add_argument("destination", help="a new or empty folder")
    copy.add_argument("models", nargs="+", help="the models to serve, with an ensemble's steps")
    arguments = parser.parse_args(argv)
    if arguments.command == "build":
        unknown = sorted(set(arguments.models) - set(BUILDERS))
        if unknown:
            parser.error(f"no generated files for {', '.join(unknown)}; "
                         f"models that have them: {', '.join(BUILDERS)}")
        built = ensure_model_files(arguments.models or None, REPOSITORY)
        for path in built:
            print("built", path.relative_to(REPOSITORY))
        print(f"{len(built)} file(s) built; every other generated file was already there")
        return
    try:
        exported = export(arguments.models, arguments.destination)
    except (ValueError, FileExistsError) as error:
        parser.error(str(error))
    print(f"exported to {arguments.destination}:", " ".join(exported))


if __name__ == "__main__":
    _main()
