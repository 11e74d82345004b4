"""What a lent GPU machine lacks, packed here for the device tool to carry.

    python -m booktools.gpu_bundle            # writes .gpu/ and .gpucv/ (ignored)

The lent machine has PyTorch but no network: the embedded server (``nvidia-pytriton``),
the clients, ``perf_analyzer`` and the numpy and OpenCV the book pins travel with the
call. One call may carry 64 MiB with the tree, so they come in two folders:

* ``.gpu/bundle.tar.xz`` (about 57 MB): the wheels installed for CPython 3.12 in
  ``site/``, numpy 1.26 in ``numpy126/`` (the 24.10 stub's pybind11 predates numpy 2),
  ``perf_analyzer`` in ``libexec/`` and the libraries it needs in ``lib/``
  (``libb64.so.0d``, the CUDA 12 runtime: the machine's PyTorch brings CUDA 13's);
* ``.gpucv/``: the OpenCV 4.11 wheel (50 MB), for chapter 6's face detector.

On the machine, ``source booktools/gpu_device.sh`` unpacks the first and sets the
environment; carry ``.gpucv`` in a second call made while the machine is warm, and the
same script installs it. ``book/gpu.md`` gives the commands that ran.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the book's GPU script needs beyond the machine's own packages, pinned
# to the versions the book's environment resolves to.
WHEELS = [
    "nvidia-pytriton==0.7.0", "tritonclient==2.73.0", "geventhttpclient==2.6.1",
    "gevent==26.9.0", "greenlet", "zope.event", "zope.interface", "brotli",
    "certifi", "python-rapidjson==1.25", "sh==2.4.0", "wrapt", "typing_inspect",
    "mypy_extensions", "pyzmq==27.3.0", "typer", "click", "rich", "shellingham",
    "markdown-it-py", "mdurl", "pygments", "importlib_metadata", "zipp", "urllib3",
    "ml-dtypes",
]
STUB_NUMPY = "numpy==1.26.4"
OPENCV = "opencv-python-headless==4.11.0.86"
# pip matches each manylinux tag exactly: these cover the wheels above.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (5, 17, 24, 26, 27, 28, 35)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64"]


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
        _install(WHEELS, bundle / "site", scratch)
        _install([STUB_NUMPY], bundle / "numpy126", scratch)
        (bundle / "libexec").mkdir()
        shutil.copy(perf.install(), bundle / "libexec" / "perf_analyzer")
        (bundle / "lib").mkdir()
        shutil.copy(_library("libb64.so.0d"), bundle / "lib" / "libb64.so.0d")
        shutil.copy(cudart, bundle / "lib" / "libcudart.so.12")
        archive = out / ".gpu" / "bundle.tar.xz"
        archive.parent.mkdir(exist_ok=True)
        with tarfile.open(archive, "w:xz", preset=6) as tar:
            for path in sorted(bundle.iterdir()):
                tar.add(path, arcname=path.name)
    opencv = out / ".gpucv"
    shutil.rmtree(opencv, ignore_errors=True)
    _pip("download", "-d", str(opencv), OPENCV)
    return [archive, *opencv.glob("*.whl")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT)
    for path in build(parser.parse_args().out):
        print(f"{path.stat().st_size / 2**20:6.1f} MiB  {path}")


if __name__ == "__main__":
    main()
