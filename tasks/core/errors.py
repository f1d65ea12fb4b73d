"""The one error type a user sees: a single line naming the file or parameter at fault."""


def printable(text: str) -> str:
    """``text`` with the bytes of a file name that is not UTF-8 (Python's surrogate escapes) written as ``\\xNN``, so
    it can be printed, logged and sent between processes (issue 82: one such name among protect's inputs crashed the
    whole batch with a ``UnicodeEncodeError``).

    >>> printable("bad\\udce9.mp4")
    'bad\\\\xe9.mp4'
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class PrivharError(Exception):
    """A problem with the user's input or configuration, reported as one line, no traceback."""


# How the command line prints a PrivharError; the orchestrator finds a failed stage's message by it.
ERROR_PREFIX = "privhar: error: "
