"""The one error type a user sees: a single line naming the file or parameter at fault."""


class PrivharError(Exception):
    """A problem with the user's input or configuration, reported as one line, no traceback."""


# How the command line prints a PrivharError; the orchestrator finds a failed stage's message by it.
ERROR_PREFIX = "privhar: error: "
