"""``python -m tritonbook.serve --run``: a separately started server for a command."""

import subprocess
import sys

# The child checks what a notebook would: TRITON_URL is set, server.start() connects
# to it instead of starting its own, and the server answers on both protocols.
CHILD = """
import os, sys
from tritonbook import server
triton = server.start()
assert type(triton).__name__ == "RemoteTriton", triton
assert os.environ["TRITON_URL"] == triton.http_url and triton.is_live()
assert triton.grpc().is_server_live()
sys.exit(int(sys.argv[1]))
"""


def serve_run(*command):
    return subprocess.run([sys.executable, "-m", "tritonbook.serve", "--http-port", "0", "--grpc-port", "0",
                           "--metrics-port", "0", "--run", *command],
                          capture_output=True, text=True, timeout=300)


def running_servers():
    listing = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if "tritonbook-embedded" in line and "--run" not in line]


def test_the_command_reaches_the_server_and_its_status_is_returned():
    before = running_servers()
    passed = serve_run(sys.executable, "-c", CHILD, "0")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Triton stopped" in passed.stdout
    failed = serve_run(sys.executable, "-c", CHILD, "3")
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert running_servers() == before  # both servers stopped with their commands


def test_run_needs_a_command():
    result = serve_run()
    assert result.returncode == 2 and "--run needs a command" in result.stderr
