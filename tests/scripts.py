"""Run ``scripts/*.py`` and ``benchmarks/*.py`` as a user does, without paying their imports
each time.

A fresh ``python scripts/x.py`` spends 2-6 s importing torch, Lightning and Hydra before it
reads its first argument; the suite runs about a hundred such commands. ``run_script`` starts
each one in a process forked from multiprocessing's fork server, which has imported those
packages once (and run nothing): the script then runs as ``__main__`` with its own argv,
environment, working directory, stdin, stdout and stderr, and its exit status is the process's,
as with ``subprocess.run``. Commands that launch other processes of their own (DDP) or that a
test kills keep ``subprocess``.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import traceback
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what most scripts import; imported once in the fork server, never run there
PRELOAD = ["torch", "lightning", "hydra", "transformer_mt.train", "transformer_mt.evaluate"]

_context = None
# Process.start() polls every live child (multiprocessing's _cleanup), and a poll reads the exit
# status the fork server sends once: a start in one thread racing a join in another leaves the
# loser an empty pipe, which multiprocessing reports as exit code 255. Starts and the reads of
# exit statuses take turns; the waits themselves run side by side.
_TURN = threading.Lock()


def _server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _main(script: str, argv: list[str], env: dict, cwd: str, stdin, out: str, err: str) -> None:
    """The child: the script as ``python script argv...`` would run it, then exit with its
    status (a traceback on stderr and 1 for an uncaught exception)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, mode in ((0, stdin, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        if path is not None:
            os.dup2(os.open(path, mode), fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # the fork server left /dev/null
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).parent))  # as for python script.py
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_script(
    script: str | Path,
    *args,
    input: str | bytes | None = None,
    env: dict | None = None,
    cwd: str | Path = ROOT,
    timeout: float = 300,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """``subprocess.run([python, script, *args], capture_output=True, ...)``, forked from the
    warm server. ``script``: a path, or a name under scripts/."""
    path = Path(script) if Path(script).is_absolute() else ROOT / "scripts" / script
    argv = [str(a) for a in args]
    with tempfile.TemporaryDirectory() as tmp:
        stdin = None
        if input is not None:
            stdin = os.path.join(tmp, "stdin")
            Path(stdin).write_bytes(input.encode() if isinstance(input, str) else input)
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        Path(out).touch()
        Path(err).touch()
        environment = dict(os.environ if env is None else env)
        child = _server().Process(
            target=_main, args=(str(path), argv, environment, str(cwd), stdin, out, err)
        )
        with _TURN:
            child.start()
        ended = wait([child.sentinel], timeout)
        command = [sys.executable, str(path), *argv]
        with _TURN:
            if not ended:
                child.kill()
            child.join()
        if not ended:
            raise subprocess.TimeoutExpired(command, timeout)
        stdout, stderr = Path(out).read_bytes(), Path(err).read_bytes()
    if text:
        stdout, stderr = stdout.decode(), stderr.decode()
    return subprocess.CompletedProcess(command, child.exitcode, stdout, stderr)
