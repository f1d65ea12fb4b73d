"""The ``privhar`` console script: a stage is handed to the warm stage server when ``privhar run`` started one.

This module imports nothing beyond the standard library, so a stage that the server runs costs this process
tens of milliseconds, not the seconds torch and MLflow take to import. Without a server (a stage run by hand,
the tests, a plain ``dvc repro``) the command line runs here, as before.

The request (see :mod:`flows.stage_server`): argv, working folder and environment as JSON, with this process's
stdin, stdout and stderr passed along (``SCM_RIGHTS``), so the stage writes where this process would have. The
server answers ``started <pid>``, then ``exited <status>``. SIGINT, SIGTERM and SIGHUP sent to this process are
forwarded to the stage's process group; if this process dies outright (SIGKILL), the server kills the stage.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from flows.stage_protocol import MESSAGE_LIMIT, SERVER_ENV

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def request(argv: list[str]) -> bytes:
    """What the server needs to run ``argv`` as this process would: the command, the folder, the environment."""
    return json.dumps(
        {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "executable": sys.executable}
    ).encode()


def run_on_server(address: str, argv: list[str]) -> int | None:
    """Run the stage on the server at ``address``; its exit status, or None where the server cannot take it."""
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(address)
        socket.send_fds(connection, [request(argv)], [0, 1, 2])
        answer = connection.recv(MESSAGE_LIMIT).decode()
    except OSError as error:
        print(
            f"privhar: the stage server at {address} is unreachable ({error.strerror or error}); running here",
            file=sys.stderr,
        )
        return None
    word, _, value = answer.partition(" ")
    if word != "started":
        print(
            f"privhar: the stage server declined ({value or 'no answer'}); running here",
            file=sys.stderr,
        )
        return None
    group = int(value)

    def forward(signum: int, frame: object) -> None:
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    answer = connection.recv(MESSAGE_LIMIT).decode()
    word, _, value = answer.partition(" ")
    if word != "exited":
        print("privhar: error: the stage server stopped before the stage finished", file=sys.stderr)
        return 1
    return int(value)


def entry_point() -> None:
    """Console script: ``privhar stage ...`` on the warm server where one serves this run, else the command line."""
    address = os.environ.get(SERVER_ENV)
    if address and sys.argv[1:2] == ["stage"]:
        status = run_on_server(address, sys.argv)
        if status is not None:
            sys.exit(status)
    from flows.cli import entry_point as run_here

    run_here()
