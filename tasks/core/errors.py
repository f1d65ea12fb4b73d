"""The one error type a user sees: a single line naming the file or parameter at fault."""


class PrivharError(Exception):
    """A problem with the user's input or configuration, reported as one line, no traceback."""
