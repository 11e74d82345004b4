# On a lent GPU machine, from the tree's root: . booktools/gpu_device.sh (make book-gpu
# does). Unpacks what booktools/gpu_bundle.py packed (.gpu/, and .gpucv/ when a call
# carries it) and sets the environment for the book's runner and its kernels.
set -e
BUNDLE=/tmp/tritonbook-gpu
if [ -f .gpu/bundle.tar.xz ] && [ ! -d "$BUNDLE/site" ]; then
    mkdir -p "$BUNDLE" && tar -C "$BUNDLE" -xJf .gpu/bundle.tar.xz
fi
if ls .gpucv/*.whl >/dev/null 2>&1 && [ ! -d "$BUNDLE/opencv" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$BUNDLE/opencv" .gpucv/*.whl
fi
# The python stub ignores PYTHONPATH (book/versions.md), so a .pth file in the
# machine's site-packages puts the tree, the wheels and OpenCV 4.11 on every
# Python's path, and numpy 1.26 first wherever TRITONBOOK_STUB_NUMPY says so.
SITE=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cat > "$SITE/zz_tritonbook.pth" <<PTH
$PWD
$BUNDLE/site
import sys; sys.path.insert(0, "$BUNDLE/opencv")
import os, sys; p = os.environ.get("TRITONBOOK_STUB_NUMPY"); p and sys.path.insert(0, p)
PTH
# tritonbook.perf looks for perf_analyzer inside the running Python's prefix.
PREFIX=$(python3 -c 'import sys; print(sys.prefix)')
mkdir -p "$PREFIX/libexec" && cp "$BUNDLE/libexec/perf_analyzer" "$PREFIX/libexec/"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TRITONBOOK_FALLBACK_NUMPY="$BUNDLE/numpy126"
set +e
