"""Errors shared by every layer."""


class BadRequest(ValueError):
    """The peer's mistake (a missing or malformed field, a bad name or body): answered with the
    message as the remark and logged as one line, never as a traceback."""
