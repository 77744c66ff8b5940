"""Errors that end a run with one line and no traceback."""


class IodlError(Exception):
    """A failure the user can act on: printed as `iodl: error: <message>`, exit status 1.
    collective: every rank has it (or has ended): rank 0 prints it, nobody aborts the job."""

    exit_code = 1

    def __init__(self, message: str = "", collective: bool = False):
        super().__init__(message)
        self.collective = collective


class UsageError(IodlError):
    """Bad input (arguments, workload files, roots): exit status 2."""

    exit_code = 2


def shown(value, width: int = 48) -> str:
    """repr(value) for an error line, its middle cut when longer than width (a 100,000-digit size
    given by mistake is named, not echoed)."""
    text = repr(value)
    if len(text) <= width:
        return text
    half = (width - 3) // 2
    return f"{text[:half]}...{text[-half:]} ({len(value) if isinstance(value, str) else len(text):,} characters)"
