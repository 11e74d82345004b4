"""AOTInductor packages, compiled once per program (chapter 3 and ``gfpgan_aoti``).

AOTInductor compiles an ``ExportedProgram`` into a ``.pt2`` package: a shared library
and the weights. On two CPU cores GFPGAN takes one and a half to two minutes, and PyTorch
2.13's AOTInductor does not use Inductor's graph cache, so the same program compiled
twice is paid twice. ``compile_package`` keeps each package it compiles in
``_build/cache/aoti/`` (inside the clone, ignored by git, removed by ``make clean``),
named by a hash of everything the package is a function of: the torch version, the
graph, its dynamic shapes, the bytes of every weight and constant, and the profile's
compile settings (the quick profile compiles scalar kernels at -O0, ``tritonbook.profile``).
The same program again, in the next notebook pass or in ``repository.build_gfpgan_aoti``,
is a copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tritonbook import profile

__all__ = ["CACHE", "Compiled", "add_tensor", "program_key", "compile_package"]

CACHE = Path(__file__).resolve().parent.parent / "_build" / "cache" / "aoti"


@dataclass(frozen=True)
class Compiled:
    path: Path
    seconds: float  # the compile's, or the copy's when it came from the cache
    cached: bool

    def __str__(self) -> str:
        size = self.path.stat().st_size / 2**20
        how = "from the build cache" if self.cached else f"compiled in {self.seconds:.0f} s"
        return f"{self.path.stem}: {size:.1f} MiB, {how}"


def add_tensor(digest, tensor) -> None:
    """Add a tensor's dtype, shape and bytes to ``digest`` (a hashlib object)."""
    import torch

    tensor = tensor.detach().cpu().contiguous()
    digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    digest.update(tensor.view(torch.uint8).numpy().tobytes())


def program_key(program) -> str:
    """sha256 of what an ExportedProgram's package depends on."""
    import torch

    digest = hashlib.sha256()
    digest.update(torch.__version__.encode())
    digest.update(program.graph_module.code.encode())
    digest.update(repr(program.range_constraints).encode())
    digest.update(repr(program.call_spec).encode())
    # The profile's compile settings make another package (tritonbook.profile).
    digest.update(repr(profile.current().aoti_options).encode())
    for source in (program.state_dict, program.constants):
        for name in sorted(source):
            value = source[name]
            digest.update(name.encode())
            if isinstance(value, torch.Tensor):
                add_tensor(digest, value)
            else:
                digest.update(repr(value).encode())
    return digest.hexdigest()


def compile_package(program, path: str | os.PathLike) -> Compiled:
    """``torch._inductor.aoti_compile_and_package(program)`` into ``path`` (a name
    ending in ``.pt2``), or a copy of the package the same program compiled to before."""
    import torch

    path = Path(path)
    cached = CACHE / f"{program_key(program)}.pt2"
    started = time.perf_counter()
    if cached.exists():
        shutil.copyfile(cached, path)
        return Compiled(path, time.perf_counter() - started, True)
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(path), inductor_configs=dict(profile.current().aoti_options)
    )
    seconds = time.perf_counter() - started
    CACHE.mkdir(parents=True, exist_ok=True)
    # Into the cache under a temporary name, then renamed: a killed run leaves no half file.
    with tempfile.NamedTemporaryFile(dir=CACHE, suffix=".partial", delete=False) as partial:
        shutil.copyfile(path, partial.name)
    os.replace(partial.name, cached)
    return Compiled(path, seconds, False)
