"""The error we raise on purpose for bad input: the scripts print its message on one line.

``UserError`` subclasses ``ValueError``, so callers that catch ``ValueError`` still do. The
scripts' top-level handler (``transformer_mt.cli.report_user_errors``) prints ``error: ...``
and exits with status 2 for it; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input (a config value, a file, a run directory): the message says what, where, how to fix."""
