"""What every script shares: one-line messages for bad input instead of tracebacks."""

from __future__ import annotations

import argparse
import functools
import re
import shlex
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


def add_reading_overrides(parser: argparse.ArgumentParser) -> None:
    """``--diagonal`` and ``--no-alike``: what a command line changes of a run's tuned reading
    beyond its tau (``Extraction.overridden`` takes them)."""
    parser.add_argument(
        "--diagonal",
        type=float,
        help="the diagonal prior's width in words (0: none; default: the run's tuned one): "
        "links far from the diagonal need more weight",
    )
    parser.add_argument(
        "--no-alike",
        dest="alike",
        action="store_const",
        const=0.0,
        help="words spelled alike not raised: the attention alone (default: as tuned)",
    )


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


def refuse_unquoted_equals(argv: list[str]) -> None:
    """Stop at a ``key=value`` override whose value holds a bare ``=`` (Lightning's checkpoint
    names: ``epoch=2-step=800.ckpt``), which Hydra's grammar rejects without naming the override:
    say which one and how to quote it, exit status 2. Quoted values, ``\\=`` and sweep functions
    (``range(start=1,stop=3)``) are Hydra's to read."""
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if value[:1] in ("'", '"') or "(" in value or not re.search(r"(?<!\\)=", value):
            continue
        print(
            f"error: {arg}: the value holds '=', which Hydra reads as the start of another "
            f"override; quote the value: {_quoted_override(key, value)}",
            file=sys.stderr,
        )
        sys.exit(2)


def _quoted_override(key: str, value: str) -> str:
    """``key=value`` with the value quoted for Hydra, then the whole quoted for a POSIX shell:
    ``"key='value'"`` where that reads back as typed, else a form that does for any value (one
    holding ``'``, ``"``, ``$`` or a backslash)."""
    if "'" in value:
        override = f'{key}="' + value.replace('"', '\\"') + '"'
    else:
        override = f"{key}='{value}'"
    if re.search(r'[$`"\\!]', override) is None:
        return f'"{override}"'
    return shlex.quote(override)
