# Deploying PyTorch on Triton: build, test and serve the book.
#   make book   execute every notebook against Triton, then build _build/html
#   make test   unit tests, nbval over the notebooks, the book build, and the built
#               book checked page by page in headless Chromium (screenshots in
#               _build/screenshots/)
#   make test-remote
#               the notebooks that use a server, under nbval, against one started
#               separately, the way they reach the NGC container (TRITON_URL); CI runs
#               it after make test
#   make check  is this machine ready? Python, libpython, glibc, g++, disk, memory,
#               perf_analyzer, and one answer from the embedded server (a minute)
#   make serve  the embedded Triton server in the foreground (ports 8000/8001/8002)
#   make student
#               workshop/: the chapters without their solutions and outputs, for students
#   make book-gpu
#               on a lent GPU machine (../shared/GPU.md, with .gpu/ carried): every
#               chapter on the GPU with the embedded server, several at once, each
#               within its budget; failing cells recorded; one archive in $OUT
# Set TRITON_URL (and TRITON_GRPC_URL) to run the notebooks against a running
# server, such as the NGC container from docker/compose.yaml, instead.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# The chapters, then the workshop guide, which reads the chapters' run times.
NOTEBOOKS = $(sort $(wildcard notebooks/*.ipynb)) book/workshop.ipynb
# Pages photographed by the browser check: the introduction and one page per part.
SCREENSHOTS = book/intro notebooks/00_environment notebooks/03_trace_parity \
              notebooks/04_dynamic_onnx_resize notebooks/06_pipelines book/workshop book/troubleshooting
# Volatile text (ports, paths, timings) that nbval must not compare literally.
# booktools.leftovers: after each notebook, no server, stub, load generator or /dev/shm
# entry of its own may remain. booktools.budget: each notebook's time beside its budget
# (booktools/budgets.json); one over 1.5 times its budget fails the run.
NBVAL = --nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg \
	-p booktools.leftovers -p booktools.budget

TRITON_HTTP_PORT    ?= 8000
TRITON_GRPC_PORT    ?= 8001
TRITON_METRICS_PORT ?= 8002
LOAD ?=
# Where pip finds torch. Empty: PyPI, whose Linux wheel is the CUDA build (with
# several GB of nvidia-* wheels). For the CPU-only build, on a laptop:
#   make venv TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: venv check book book-gpu execute html test test-remote serve student clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-navigator.txt requirements-analyzer.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# The pinned torch from TORCH_INDEX first, when set; requirements.txt's torch==
	# pin then accepts it (2.13.0+cpu is a 2.13.0).
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --quiet \
	    --index-url $(TORCH_INDEX) "$$(grep '^torch==' requirements.txt)")
	$(BIN)/python -m pip install --quiet -r requirements.txt
	# Model Navigator without its declared dependencies (the file says why).
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-navigator.txt
	# Model Analyzer likewise (the file says why).
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-analyzer.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	# perf_analyzer, NVIDIA's load generator, from the tritonclient 2.51.0 wheel
	# (tritonbook/perf.py says why that one).
	$(BIN)/python -c "from tritonbook import perf; perf.install()"
	touch $@

check: venv
	$(BIN)/python -m booktools.preflight

book: execute html

execute: venv
	$(BIN)/python -m booktools.execute $(NOTEBOOKS)

html: venv
	$(BIN)/jupyter-book build -W --keep-going .

test: venv
	# The notebooks first, as a reader runs them on a fresh clone: they build the C++
	# extension and the model files, which the unit tests then find in place. The book's
	# own runner, as make book and make book-gpu use it, on this machine's device: copies
	# in _build/executed, the checked outputs compared with the committed ones, nothing
	# left behind, each notebook's time beside its budget (booktools/execute.py).
	$(BIN)/python -m booktools.execute --check --out _build/executed $(NOTEBOOKS)
	# The unit tests that measure load or watch processes alone, then the others two at a time.
	$(BIN)/python -m pytest tests -m serial --durations=10
	$(BIN)/python -m pytest tests -m "not serial" -n 2 --dist loadfile --durations=10
	$(BIN)/jupyter-book build -W --keep-going .
	$(BIN)/python -m booktools.browser _build/html --screenshots _build/screenshots \
	    $(foreach page,$(SCREENSHOTS),--shoot $(page))

# The notebooks that talk to a server (the others never read TRITON_URL), against one
# server started before them by tritonbook.serve on free ports: each notebook's
# server.start() finds TRITON_URL and connects to it instead of starting its own.
SERVER_NOTEBOOKS = $(shell grep -l 'server.start()' $(NOTEBOOKS))

test-remote: venv
	$(BIN)/python -m tritonbook.serve --http-port 0 --grpc-port 0 --metrics-port 0 \
	    --run $(BIN)/python -m pytest $(SERVER_NOTEBOOKS) $(NBVAL) --durations=30

serve: venv
	TRITON_HTTP_PORT=$(TRITON_HTTP_PORT) TRITON_GRPC_PORT=$(TRITON_GRPC_PORT) \
	TRITON_METRICS_PORT=$(TRITON_METRICS_PORT) \
	$(BIN)/python -m tritonbook.serve $(foreach m,$(LOAD),--load-model $(m))

# The GPU machine has its own Python and torch and no network: booktools/gpu_device.sh
# unpacks what python -m booktools.gpu_bundle packed here. Chapters only (not the
# workshop guide); GPU_NOTEBOOKS= re-runs some of them, in a second call.
GPU_NOTEBOOKS ?= $(sort $(wildcard notebooks/*.ipynb))
# Six at once on the machine's 16 cores (about 2.5 cores each): with the plan's budgets,
# done in 300 s or less.
GPU_JOBS = 6
OUT ?= _build

book-gpu:
	. booktools/gpu_device.sh && TRITONBOOK_DEVICE=cuda python3 -m booktools.execute \
	    --plan gpu --jobs $(GPU_JOBS) --keep-going --out _build/gpu --archive $(OUT)/book-gpu.tar.gz \
	    $(GPU_NOTEBOOKS)

student: venv
	$(BIN)/python -m booktools.student $(sort $(wildcard notebooks/*.ipynb)) --out workshop

clean:
	rm -rf _build
