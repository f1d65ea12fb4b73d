"""What the console script and the warm stage server agree on (standard library only: the client imports it first).

The request: argv, working folder and environment as JSON, with the client's stdin, stdout and stderr passed along
(``SCM_RIGHTS``); the server answers ``started <pid>``, then ``exited <status>`` (flows/launch.py, the client;
flows/stage_server.py, the server).
"""

from __future__ import annotations

SERVER_ENV = "PRIVHAR_STAGE_SERVER"  # the server's socket, exported by the runner that started it
MESSAGE_LIMIT = 1 << 20
