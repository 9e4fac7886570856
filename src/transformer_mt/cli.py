"""What every script shares: one-line messages for bad input instead of tracebacks."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import TypeVar

from omegaconf.errors import InterpolationResolutionError

from transformer_mt.errors import UserError

F = TypeVar("F", bound=Callable)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, as every other bad input is:
    ``error: <message> (see <script> --help)`` on stderr, exit status 2."""

    def error(self, message: str):  # argparse calls it for a bad or missing argument
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def report_user_errors(main: F) -> F:
    """Run ``main``; a ``UserError`` (or a FileNotFoundError) becomes ``error: <message>`` and exit 2.

    Errors of other types are bugs: they propagate with their traceback.
    """

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except (UserError, FileNotFoundError) as err:
            no_file = isinstance(err, FileNotFoundError) and err.filename is not None
            message = f"{err.filename}: no such file" if no_file else str(err)
            print(f"error: {message}", file=sys.stderr)
            sys.exit(2)
        except InterpolationResolutionError as err:
            if "Environment variable" not in str(err):
                raise
            # e.g. a recipe that reads corpora from $TRANSFORMER_MT_DATA, run without it
            first = str(err).splitlines()[0]
            key = getattr(err, "full_key", "")
            print(
                f"error: {key}: {first.split(': ', 1)[-1]}; set it (export NAME=/path) or "
                f"override {key or 'the key'} on the command line",
                file=sys.stderr,
            )
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
