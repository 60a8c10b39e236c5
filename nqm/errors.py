"""The one exception type users see for bad input."""


class NqmError(ValueError):
    """Bad input: the message is one line saying what is wrong and how to fix it."""
