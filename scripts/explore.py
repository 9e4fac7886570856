"""Explore a trained model's attention in the browser (Gradio; pip install -e ".[app]").

    python scripts/explore.py outputs/demo_es_en/tiny/<run>            # http://127.0.0.1:7860
    python scripts/explore.py <run> --port 8080 --host 0.0.0.0          # reachable from elsewhere

Type or pick a source sentence: its translation (greedy, or beam search with any of the n-best),
or a target of your own (teacher-force mode); cross-, decoder and encoder self-attention of any
layer and head (or the heads' mean), in words or pieces, the weight of a cell on hover; the hard
alignment as lines; each word's entropy and coverage. Runs on a CPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_mt.checkpoint import resolve_checkpoint
from transformer_mt.cli import ArgumentParser, report_user_errors
from transformer_mt.errors import UserError


@report_user_errors
def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path, help="a run directory from scripts/train.py")
    parser.add_argument("--port", type=int, default=7860, help="port to serve on (default 7860)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to serve on (0.0.0.0: every interface)"
    )
    parser.add_argument(
        "--average-last", type=int, default=1, help="average the last N checkpoints"
    )
    args = parser.parse_args()
    resolve_checkpoint(args.run_dir)  # a wrong run directory is an error here, not a page
    try:
        from transformer_mt.app.explorer import launch  # the app extra, loaded lazily
    except ImportError as err:
        raise UserError(
            f'the explorer needs the app extra ({err.name} is missing): pip install -e ".[app]"'
        ) from None
    launch(args.run_dir, args.port, args.host, args.average_last)


if __name__ == "__main__":
    main()
