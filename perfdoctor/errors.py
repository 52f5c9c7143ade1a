"""Errors that mean "the user gave us something we cannot use".

The CLI turns a :class:`UsageError` into one line on stderr and exit code 2; anything
else is a bug in perfdoctor and keeps its traceback.
"""


class UsageError(Exception):
    """Bad input: a missing file, a malformed trace, an unknown option value."""
