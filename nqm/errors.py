"""The one exception type users see for bad input, and the one warning for what was asked but not done."""


class NqmError(ValueError):
    """Bad input: the message is one line saying what is wrong and how to fix it."""


class NqmWarning(UserWarning):
    """Something asked for that does not apply here and was left out (an overlay a method has none
    of): one line saying what and why; the command line prints it as ``nqm: note: …``."""
