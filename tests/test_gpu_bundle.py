"""What a lent GPU machine lacks, packed to travel with one device call (issue 53)."""

import tarfile

from booktools import gpu_bundle


def test_the_bundle_fits_one_call_with_the_tree(tmp_path):
    archive, *opencv = gpu_bundle.build(tmp_path)
    carried = archive.stat().st_size + gpu_bundle.tree_bytes()
    assert carried <= gpu_bundle.CARRY_LIMIT, f"{carried / 2**20:.1f} MiB to carry"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    tops = {name.split("/")[1] for name in names if name.startswith("site/")}
    # The server, the clients, the kernel and the runner, the navigator.
    assert {"pytriton", "tritonclient", "ipykernel", "nbclient", "jupyter_cache",
            "model_navigator"} <= tops, tops
    assert "libexec/perf_analyzer" in names and "lib/libb64.so.0d" in names
    assert "numpy126/numpy/__init__.py" in names
    stubs = {name.split("/")[4] for name in names if "/python_backend_stubs/" in name
             and name.count("/") >= 4}
    assert stubs == {"3.12"}, stubs  # the machine's Python only
    assert not [name for name in names if "libpython3-" in name or "/tests/" in name]
    assert [path.name for path in opencv] == [
        "opencv_python_headless-4.11.0.86-cp37-abi3-manylinux_2_17_x86_64."
        "manylinux2014_x86_64.whl"]


def test_the_bundle_is_what_the_book_imports_with_its_dependencies():
    wanted = {line.split("==")[0] for line in gpu_bundle.closure()}
    # tritonclient.http's transport, the kernel's, the navigator's curated set.
    assert {"tritonclient", "geventhttpclient", "gevent", "pyzmq", "ipykernel", "nbclient",
            "jupyter-cache", "sqlalchemy", "triton-model-navigator", "polygraphy"} <= wanted
    # Left behind: the machine's own, and what the book never uses.
    assert not wanted & {"numpy", "protobuf", "debugpy", "aiohttp", "tensorrt", "typer"}
