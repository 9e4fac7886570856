"""Parallel text from local files: two line-aligned files or one TSV, plain or gzipped.

Read through ``Dataset.from_generator`` (streamed, Arrow-cached, keyed by each file's path,
size and modification time); a line that is not UTF-8 or files of different lengths are a
``UserError`` naming the file and the line.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

from datasets import Dataset, Features, Value
from datasets.exceptions import DatasetGenerationError

from transformer_mt.config import DataConfig
from transformer_mt.errors import UserError


def load_local(cfg: DataConfig, split: str) -> Dataset:
    """One split from line-aligned files through ``Dataset.from_generator`` (streamed, Arrow-cached)."""
    files = cfg.split_files().get(split)
    paths = [Path(p).expanduser() for p in files or []]
    if len(paths) not in (1, 2):
        raise UserError(
            f"data.files.{split} must list a source and a target file, or one TSV file; got {files}"
        )
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"data.files.{split}: {path} does not exist")
    # Size and modification time make the cache key change when a file does.
    stamps = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths]
    try:
        return Dataset.from_generator(
            _read_pairs,
            gen_kwargs={
                "stamps": json.dumps(stamps),
                "split": split,
            },  # a string: lists would be sharded
            cache_dir=str(Path(cfg.cache_dir) / "hf"),
            features=Features({"src": Value("string"), "tgt": Value("string")}),
        )
    except DatasetGenerationError as err:  # surface our own message, not the builder's wrapper
        if isinstance(err.__cause__, ValueError):
            raise err.__cause__ from None
        raise
    except ValueError as err:
        if "corresponds to no data" in str(
            err
        ):  # datasets' words for a generator that yielded nothing
            raise UserError(
                f"split {split!r} of data={cfg.name} has no pairs: {[str(p) for p in paths]} "
                "are empty"
            ) from None
        raise


def open_text(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def decode_line(line: bytes, path: str, number: int) -> str:
    try:
        return line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path}, line {number}: not valid UTF-8 ({err.reason} at byte {err.start}); "
            "convert the file, e.g. iconv -f latin1 -t utf-8"
        ) from None


def _read_pairs(stamps: str, split: str):
    """Yield {"src", "tgt"} from two aligned files or one TSV, checking alignment as it goes."""
    paths = [Path(s[0]) for s in json.loads(stamps)]
    if len(paths) == 1:
        with open_text(paths[0]) as f:
            for number, line in enumerate(f, 1):
                fields = decode_line(line, str(paths[0]), number).split("\t")
                if len(fields) < 2:
                    raise UserError(
                        f"{paths[0]}, line {number}: expected source<TAB>target, found no tab"
                    )
                yield {"src": fields[0], "tgt": fields[1]}
        return
    with open_text(paths[0]) as fs, open_text(paths[1]) as ft:
        number = 0
        for number, (s, t) in enumerate(itertools.zip_longest(fs, ft), 1):
            if s is None or t is None:
                shorter, longer = (paths[0], paths[1]) if s is None else (paths[1], paths[0])
                raise UserError(
                    f"data.files.{split}: {shorter} ends at line {number - 1} but {longer} goes on "
                    f"(line {number}); source and target files must have the same number of lines"
                )
            yield {
                "src": decode_line(s, str(paths[0]), number),
                "tgt": decode_line(t, str(paths[1]), number),
            }
