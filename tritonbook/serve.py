"""Run the embedded Triton server in the foreground, like the container does.

    python -m tritonbook.serve [--load-model NAME ...]

Ports default to the container's (8000 HTTP, 8001 gRPC, 8002 metrics), on 127.0.0.1,
and follow TRITON_HTTP_PORT / TRITON_GRPC_PORT / TRITON_METRICS_PORT. Models are
loaded only on request (explicit model control): with --load-model, or through the
repository API, e.g. ``curl -X POST 127.0.0.1:8000/v2/repository/models/NAME/load``.
Ctrl-C stops the server and everything it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from tritonbook.repository import REPOSITORY, ensure_model_files
from tritonbook.server import EmbeddedTriton, TritonServerError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-repository", default=str(REPOSITORY))
    parser.add_argument("--load-model", action="append", default=[], metavar="NAME",
                        help="load this model at start (repeatable; '*' loads all)")
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("TRITON_HTTP_PORT", 8000)))
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("TRITON_GRPC_PORT", 8001)))
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("TRITON_METRICS_PORT", 8002)))
    parser.add_argument("--log-verbose", type=int, default=0)
    args = parser.parse_args(argv)

    # Generated model files (TorchScript, ONNX) for the models asked for.
    wanted = [m for m in args.load_model if m != "*"]
    everything = "*" in args.load_model
    for path in ensure_model_files(None if everything else wanted, args.model_repository):
        print(f"built {path}", flush=True)

    # Ctrl-C and `kill` both end in a clean stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server = EmbeddedTriton(
            args.model_repository,
            http_port=args.http_port,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            load_models=args.load_model,
            log_verbose=args.log_verbose,
        )
    except TritonServerError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        with open(server.log_path, errors="replace") as log:
            print(log.read(), end="", flush=True)
            print(
                f"\nTriton is ready: HTTP http://{server.http_url}  gRPC {server.grpc_url}  "
                f"metrics http://{server.metrics_url}/metrics  (Ctrl-C stops it)",
                flush=True,
            )
            _follow(log, server)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print("Triton stopped.", flush=True)
    return 0 if server.process.returncode in (0, -signal.SIGTERM, None) else 1


def _follow(log, server: EmbeddedTriton) -> None:
    """Print the server log as it grows, until the server exits."""
    while server.process.poll() is None:
        line = log.readline()
        if line:
            print(line, end="", flush=True)
        else:
            time.sleep(0.2)
    print(log.read(), end="", flush=True)


if __name__ == "__main__":
    sys.exit(main())
