"""Run the embedded Triton server in the foreground, like the container does.

    python -m tritonbook.serve [--load-model NAME ...]
    python -m tritonbook.serve --http-port 0 ... --run COMMAND [ARG ...]

Ports default to the container's (8000 HTTP, 8001 gRPC, 8002 metrics), on 127.0.0.1,
and follow TRITON_HTTP_PORT / TRITON_GRPC_PORT / TRITON_METRICS_PORT; 0 takes a free
port. Models are loaded only on request (explicit model control): with --load-model, or
through the repository API, e.g. ``curl -X POST 127.0.0.1:8000/v2/repository/models/NAME/load``.
Ctrl-C stops the server and everything it started.

With --run, the server runs in the background while COMMAND runs with TRITON_URL and
TRITON_GRPC_URL pointing at it, the way a reader's notebooks reach the NGC container;
then the server stops, and the exit status is COMMAND's. ``make test-remote`` uses it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
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
    parser.add_argument("--auto-complete", action="store_true",
                        help="let backends complete model configs (Triton's default and the "
                             "container's; the book's server leaves it off)")
    parser.add_argument("--run", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="run COMMAND against the server, then stop it (must come last)")
    args = parser.parse_args(argv)
    if args.run is not None and not args.run:
        parser.error("--run needs a command")

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
            # 0 (or None) lets the server module pick free ports.
            http_port=args.http_port or None,
            grpc_port=args.grpc_port or None,
            metrics_port=args.metrics_port or None,
            load_models=args.load_model,
            log_verbose=args.log_verbose,
            auto_complete=args.auto_complete,
        )
    except TritonServerError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.run is not None:
        return _run_against(server, args.run)
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


def _run_against(server: EmbeddedTriton, command: list[str]) -> int:
    """Run ``command`` with TRITON_URL / TRITON_GRPC_URL set to ``server``, then stop it."""
    environment = {**os.environ, "TRITON_URL": server.http_url, "TRITON_GRPC_URL": server.grpc_url,
                   "TRITON_METRICS_URL": server.metrics_url}
    print(f"Triton is ready: HTTP http://{server.http_url}  gRPC {server.grpc_url}; running "
          f"{' '.join(command)}", flush=True)
    try:
        returncode = subprocess.call(command, env=environment)
    except KeyboardInterrupt:
        returncode = 130
    finally:
        alive = server.process.poll() is None
        server.stop()
    if not alive:
        # The command may have passed against a dead server only by luck; say so.
        print(f"the server exited during the run; its log ends:\n{server.log_tail()}", file=sys.stderr)
        return returncode or 1
    print(f"Triton stopped; {' '.join(command[:1])} exited with {returncode}.", flush=True)
    return returncode


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
