"""The one exception type users see.

An `NnperfError` carries a single line that names the key or file at fault and what is
allowed. The CLI prints it without a traceback; anything else is a bug and keeps its
traceback.
"""


class NnperfError(Exception):
    """A user-facing error: bad input, an unavailable device, a corrupt file."""
