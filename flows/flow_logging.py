"""What ``privhar flow`` shows on the terminal: Prefect's lines, not its tracebacks.

A failed stage ends the flow with one line naming it. Prefect's task and flow loggers also
print the exception's traceback to the console before that; here they go to a log file
(``.privhar/flow.log``) instead, which the one-line error names, and the console keeps the
first line of each record.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

LOG_NAME = Path(".privhar") / "flow.log"


class TracebacksToFile(logging.Filter):
    """Writes every record whole to the log file; lets only its first line, without traceback, reach the console."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = logging.FileHandler(path)
        self.file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))

    def filter(self, record: logging.LogRecord) -> bool:
        self.file.handle(record)
        message = record.getMessage()
        if record.exc_info or "\n" in message:
            record.msg, record.args = message.splitlines()[0] if message else "", None
            record.exc_info, record.exc_text = None, None
        return True


def tracebacks_to_file(project: Path) -> Path:
    """Install the filter on every console handler of Prefect's loggers; return the log file's path."""
    path = Path(project) / LOG_NAME
    keep = TracebacksToFile(path)
    loggers = [
        logging.root,
        *[
            logging.getLogger(n)
            for n in list(logging.root.manager.loggerDict)
            if n.startswith("prefect")
        ],
    ]
    for (
        logger
    ) in loggers:  # Prefect's console handler sits on the root logger (prefect/logging/logging.yml)
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                handler.addFilter(keep)
    return path


def log_stages_to_stderr() -> None:
    """The stages log through ``logging.getLogger("tasks.…")``: their progress and privacy lines go to stderr, once."""
    tasks_logger = logging.getLogger("tasks")
    if not tasks_logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        tasks_logger.addHandler(handler)
        tasks_logger.setLevel(logging.INFO)
        tasks_logger.propagate = (
            False  # once on stderr, not again through a root handler another library set up
        )
