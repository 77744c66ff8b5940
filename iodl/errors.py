"""Errors that end a run with one line and no traceback."""


class IodlError(Exception):
    """A failure the user can act on: printed as `iodl: error: <message>`, exit status 1."""

    exit_code = 1


class UsageError(IodlError):
    """Bad input (arguments, workload files, roots): exit status 2."""

    exit_code = 2
