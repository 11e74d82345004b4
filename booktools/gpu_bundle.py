"""What a lent GPU machine lacks, packed here for the device tool to carry.

    python -m booktools.gpu_bundle            # writes .gpu/ and .gpucv/ (ignored)

The lent machine has Python 3.12, PyTorch and no network (../shared/GPU.md): what
``make book-gpu`` needs beyond its own packages travels with the call. One call may carry
64 MiB with the tree (``CARRY_LIMIT``), so it comes in two folders:

* ``.gpu/bundle.tar.xz``: the wheels installed for CPython 3.12 in ``site/`` (the
  embedded server's files, and ``closure()``: the clients, the kernel and runner that
  execute the notebooks, Model Navigator, with their dependencies), numpy 1.26 in ``numpy126/`` (the 24.10
  stub's pybind11 predates numpy 2), ``perf_analyzer`` in ``libexec/`` and the libraries
  it needs in ``lib/`` (``libb64.so.0d``, the CUDA 12 runtime: the machine's PyTorch
  brings CUDA 13's). What the machine cannot use is left out (``UNUSED``): the python
  stubs and libpython of other Python versions, the packages' own tests.
* ``.gpucv/``: the OpenCV 4.11 wheel (48 MiB), for chapter 6's face detector: the
  machine's OpenCV 5 has no ``cv2.CascadeClassifier``. It does not fit in the same call;
  carry it in a second call, while the machine is warm, that re-runs chapter 6.

Versions are this environment's (``requirements.txt``, ``requirements-navigator.txt``),
so the machine runs what CI tested. On the machine, ``. booktools/gpu_device.sh``
unpacks both and sets the environment (``make book-gpu`` does).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY_LIMIT = 64 * 2**20

# The embedded server: the wheel's files (tritonserver, the python backend, its stubs),
# not its Python API, so none of its dependencies.
FILES_ONLY = ["nvidia-pytriton"]
# What the notebooks and the runner import, with every dependency for CPython 3.12 on
# Linux (``closure``): the clients, the kernel, the runner (and jupyter-cache, whose hash
# the provenance records), Model Navigator.
IMPORTED = ["tritonclient[http,grpc]", "ipykernel", "nbclient", "jupyter-cache",
            "triton-model-navigator"]
# On the machine already (../shared/GPU.md): torch, onnx and the rest bring these.
ON_THE_MACHINE = {"numpy", "protobuf", "grpcio", "typing-extensions", "packaging", "ml-dtypes",
                  "onnx", "onnxscript", "onnxruntime-gpu", "mpmath"}
# Declared, never used by the book: left behind, each with the reason.
NOT_USED = {
    "debugpy": "ipykernel's debugger",
    "aiohttp": "tritonclient.http.aio; the book's clients are synchronous",
    "tensorrt": "the navigator's TensorRT path (requirements-navigator.txt says why)",
    "nvidia-modelopt": "the navigator's quantization path (requirements-navigator.txt)",
}
STUB_NUMPY = "numpy==1.26.4"
OPENCV = "opencv-python-headless==4.11.0.86"
# Inside the installed wheels: what a Python 3.12 machine never loads.
UNUSED = ["pytriton/tritonserver/python_backend_stubs/3.[!1]*",
          "pytriton/tritonserver/python_backend_stubs/3.1[!2]",
          "nvidia_pytriton.libs/libpython3-*.13.so*", "**/tests"]
# pip matches each manylinux tag exactly: these cover the wheels above.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (5, 17, 24, 26, 27, 28, 35)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64"]


def closure(roots: list[str] = IMPORTED) -> list[str]:
    """Every distribution the roots need on the machine, pinned to this environment's
    versions: the roots, their dependencies (markers read for CPython 3.12 on Linux,
    extras as the roots ask), theirs, and so on, but what ``ON_THE_MACHINE`` and
    ``NOT_USED`` name."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    target = dict(default_environment(), python_version="3.12", python_full_version="3.12.3",
                  sys_platform="linux", platform_system="Linux", platform_machine="x86_64")
    skip = {canonicalize_name(name) for name in (*ON_THE_MACHINE, *NOT_USED)}
    found, todo = {}, [Requirement(root) for root in roots]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in skip or (name in found and requirement.extras <= found[name]):
            continue
        found[name] = found.get(name, set()) | requirement.extras
        for line in metadata.requires(name) or []:
            needed = Requirement(line)
            wanted = [dict(target, extra=extra) for extra in ("", *found[name])]
            if needed.marker is None or any(needed.marker.evaluate(e) for e in wanted):
                todo.append(needed)
    return sorted(f"{name}=={metadata.version(name)}" for name in found)


def _pip(*args: str) -> None:
    target = ["--python-version", "3.12", "--implementation", "cp",
              "--only-binary=:all:", "--no-deps"]
    for platform in PLATFORMS:
        target += ["--platform", platform]
    subprocess.run([sys.executable, "-m", "pip", *args, "--quiet", *target], check=True)


def _install(requirements: list[str], into: Path, scratch: Path) -> None:
    wheels = scratch / into.name
    _pip("download", "-d", str(wheels), *requirements)
    _pip("install", "--no-index", "--no-compile", "--target", str(into),
         *map(str, sorted(wheels.glob("*.whl"))))
    for pattern in UNUSED:
        for path in list(into.glob(pattern)):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)  # a tests/ inside one removed before
            else:
                path.unlink(missing_ok=True)


def _library(name: str) -> Path:
    """A shared library as this machine's loader finds it."""
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in found.splitlines():
        if line.strip().startswith(name + " ") and "=>" in line:
            return Path(line.split("=>")[1].strip()).resolve()
    raise FileNotFoundError(f"{name}: install it here first (libb64-0d)")


def build(out: Path = ROOT) -> list[Path]:
    from tritonbook import perf

    import nvidia.cuda_runtime

    cudart = Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib" / "libcudart.so.12"
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        bundle = scratch / "bundle"
        requirements = closure() + [f"{name}=={metadata.version(name)}" for name in FILES_ONLY]
        _install(requirements, bundle / "site", scratch)
        _install([STUB_NUMPY], bundle / "numpy126", scratch)
        (bundle / "libexec").mkdir()
        shutil.copy(perf.install(), bundle / "libexec" / "perf_analyzer")
        (bundle / "lib").mkdir()
        shutil.copy(_library("libb64.so.0d"), bundle / "lib" / "libb64.so.0d")
        shutil.copy(cudart, bundle / "lib" / "libcudart.so.12")
        archive = out / ".gpu" / "bundle.tar.xz"
        archive.parent.mkdir(exist_ok=True)
        # xz on every core (in blocks, so a little larger than on one).
        subprocess.run(["tar", "-C", str(bundle), "-I", "xz -6 -T0", "-cf", str(archive),
                        *sorted(p.name for p in bundle.iterdir())], check=True)
    opencv = out / ".gpucv"
    shutil.rmtree(opencv, ignore_errors=True)
    _pip("download", "-d", str(opencv), OPENCV)
    return [archive, *opencv.glob("*.whl")]


def tree_bytes() -> int:
    """What the device tool carries of the tree itself: the files git tracks."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                            check=True).stdout.split(b"\0")
    return sum((ROOT / name.decode()).stat().st_size for name in listed
               if name and (ROOT / name.decode()).is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT)
    for path in build(parser.parse_args().out):
        print(f"{path.stat().st_size / 2**20:6.1f} MiB  {path}")
    print(f"{tree_bytes() / 2**20:6.1f} MiB  the tree (git ls-files); a call carries "
          f"{CARRY_LIMIT / 2**20:.0f} MiB with it")


if __name__ == "__main__":
    main()
