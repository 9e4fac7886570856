"""What the attention explorer does, without the web page: load a run, translate (greedy or
beam, n-best) or take a given target, capture every attention map of the chosen hypothesis,
and draw it, cross-attention in any ``HeadReading`` mode and extraction (the run opens on
``default_reading``: its guided head, else its recorded best, else the last layer's mean).
``transformer_mt.app.explorer`` puts a Gradio page on top; tests drive this class directly as
well as through a browser.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from transformer_mt.align.reading import (
    MODES,
    HeadReading,
    default_reading,
    guided_reading,
    with_tuned,
)
from transformer_mt.analysis.capture import PairAttention, pair_attention
from transformer_mt.checkpoint import load_model, run_data_config
from transformer_mt.data.files import open_text
from transformer_mt.data.sources import demo_files
from transformer_mt.decoding import DecodeConfig
from transformer_mt.decoding.text import translate
from transformer_mt.errors import UserError
from transformer_mt.model.positions import fit_positions

# The demo corpus's showcases: crossing adjectives, gender/number agreement, contractions.
DEMO_EXAMPLES = [
    "el gato negro duerme en casa",
    "las mujeres enormes van a los árboles bonitos",
    "la hermana juega debajo del sombrero",
    "mi amigo va al parque",
    "los ratones negros bailan",
]
KIND_NAMES = {
    "cross": "cross-attention (target <- source)",
    "decoder": "decoder self-attention (target <- target so far)",
    "encoder": "encoder self-attention (source <- source)",
}


@dataclass(frozen=True)
class Hypothesis:
    text: str
    tokens: list[int]  # target piece ids, without BOS/EOS
    score: float  # beam search's length-normalised log-probability; 0.0 greedy or given

    def label(self, rank: int) -> str:
        return f"{rank}. {self.text}" + (f"   ({self.score:.3f})" if self.score else "")


class Explorer:
    """One trained run, loaded once; every method is safe to call from several page sessions."""

    def __init__(self, run_dir: str | Path, average_last: int = 1) -> None:
        if not str(run_dir).strip():
            raise UserError("no run directory given: type the path of a run of scripts/train.py")
        self.run_dir = Path(run_dir).expanduser()
        if not self.run_dir.exists():
            raise UserError(
                f"{self.run_dir} does not exist: give a run directory of scripts/train.py"
            )
        try:
            self.model, self.tokenizer, _ = load_model(self.run_dir, average_last=average_last)
        except FileNotFoundError as err:  # not a run directory: say so, in our words
            raise UserError(str(err)) from None
        self.model.eval()
        # the head trained with align.guided (None without)
        self.guided: HeadReading | None = guided_reading(self.run_dir, self.n_layers, self.n_heads)
        # what the page opens on: the head every command reads unless told
        self.opening: HeadReading = default_reading(self.run_dir, self.n_layers, self.n_heads)

    def head_reading(
        self, layer: int, head: int | None, mode: str, method: str = "argmax"
    ) -> HeadReading:
        """The page's layer, head (None: the mean), mode and method as a ``HeadReading``,
        checked against the model where every ``--head`` is, read as every command reads it
        (``with_tuned``: the tuned parameters for the tuned head), by ``method``."""
        _check_mode(mode)
        reading = HeadReading.of(layer, head, mode, self.n_layers, self.n_heads)
        reading = with_tuned(reading, self.run_dir)
        if reading.extraction.method == method:
            return reading
        return reading.read_by(reading.extraction.overridden(method))

    @property
    def n_layers(self) -> int:
        return self.model.cfg.n_layers

    @property
    def n_heads(self) -> int:
        return self.model.cfg.n_heads

    def examples(self, limit: int = 8, max_words: int = 20) -> list[str]:
        """Example sources: the run's ``data.example``, the demo's showcases for a demo run,
        then validation sentences of at most ``max_words`` words (demo and local data)."""
        found: list[str] = []
        try:
            data = run_data_config(self.run_dir)
        except (UserError, OSError, ValueError):  # a bare checkpoint file: no data config
            return found
        if data.example:
            found.append(data.example)
        if data.source == "demo":
            found += DEMO_EXAMPLES
        found += self._validation_sources(data, limit, max_words)
        unique = list(dict.fromkeys(s for s in found if s.strip()))
        return unique[:limit]

    @staticmethod
    def _validation_sources(data, limit: int, max_words: int) -> list[str]:
        """The first short validation sources, where they can be read without a download."""
        try:
            if data.source == "demo":
                with open(demo_files(data)["valid"], encoding="utf-8") as f:
                    sources = (json.loads(line)["src"] for line in f)
                    return [s for _, s in zip(range(200), sources) if len(s.split()) <= max_words][
                        :limit
                    ]
            if data.source == "local" and not data.holdout:
                path = Path(data.split_files()["valid"][0])
                with open_text(path) as f:
                    lines = (line.decode("utf-8", "replace").strip() for line in f)
                    return [
                        s for _, s in zip(range(200), lines) if 0 < len(s.split()) <= max_words
                    ][:limit]
        except (OSError, KeyError, IndexError, UserError, ValueError):
            pass
        return []

    def _ids(self, text: str, side: str) -> list[int]:
        """Piece ids of ``text`` (no EOS); empty text is refused, a side longer than the model
        reads keeps its first pieces (``fit_positions``: one warning, as every entry point)."""
        if not text or not text.strip():
            raise UserError(f"the {side} is empty: type a sentence")
        ids = self.tokenizer.encode([text])[0]
        return fit_positions([ids], self.model.cfg.max_positions, side)[0]

    def translate(
        self, source: str, beam_size: int = 1, n_best: int = 1, alpha: float = 0.6
    ) -> tuple[list[int], list[Hypothesis]]:
        """The source's piece ids and its ``n_best`` translations (greedy when beam_size is 1)."""
        beam_size, n_best = int(beam_size), int(n_best)
        if beam_size < 1:
            raise UserError(f"beam size {beam_size}: use 1 (greedy) or more")
        if not 1 <= n_best <= beam_size:
            raise UserError(f"n-best {n_best}: use 1 to the beam size ({beam_size})")
        src_ids = self._ids(source, "source")
        cfg = DecodeConfig(beam_size=beam_size, length_penalty=alpha, batch_size=1)
        # a whole source is translated as typed, a cut one as read (its first pieces)
        whole = src_ids == self.tokenizer.encode([source])[0]
        read = source if whole else self.tokenizer.decode([src_ids])[0]
        found = translate(self.model, self.tokenizer, [read], cfg, n_best)[0]
        return src_ids, [Hypothesis(t.text, list(t.tokens), float(t.score)) for t in found]

    def given(self, source: str, target: str) -> tuple[list[int], list[Hypothesis]]:
        """Teacher forcing: the source's ids and the given target as the one hypothesis."""
        src_ids = self._ids(source, "source")
        tgt_ids = self._ids(target, "target")
        return src_ids, [Hypothesis(self.tokenizer.decode([tgt_ids])[0], tgt_ids, 0.0)]

    def attention(
        self, src_ids: list[int], hypothesis: Hypothesis, mode: str = "causal"
    ) -> PairAttention:
        """Every attention map of the source and one hypothesis (teacher-forced on it), with
        the whole hypothesis as the decoder's context in ``full`` mode."""
        _check_mode(mode)
        return pair_attention(
            self.model,
            self.tokenizer,
            src_ids,
            hypothesis.tokens,
            full_context=mode == "full",
        )

    def figures(
        self,
        pair: PairAttention,
        kind: str,
        layer: int,
        head: int | None,
        unit: str,
        mode: str = "causal",
        method: str = "argmax",
    ):
        """The heatmap of ``kind`` for one layer (1-based) and head (1-based, None: the mean),
        in words or pieces; the hard alignment as lines, read by ``method`` (an
        ``EXTRACTIONS`` method, with the run's tuned tau and prior if ``align.py --tune-on``
        recorded one); entropy and coverage (both from cross-attention of the same layer and
        head, in words).

        ``mode`` ``shift``: each target word's cross-attention row is the one where it is
        the decoder's input (the heatmap then has no EOS row); ``full`` expects ``pair``
        captured that way (``attention(..., "full")``). The titles name the mode.
        """
        from transformer_mt.viz.interactive import (
            alignment_lines,
            attention_heatmap,
            entropy_and_coverage,
        )

        reading = self.head_reading(layer, head, mode, method)
        shift = reading.shift
        which = f"layer {layer}, " + ("heads averaged" if head is None else f"head {head}")
        if mode != "causal":
            which += f", {mode} reading"
        rows, cols = pair.labels(kind, unit)
        weights = _pick(pair.view(kind, unit), layer, head)
        if shift and kind == "cross":  # target word t: the row where it is the input
            weights, rows = weights[1:], rows[:-1]
        row_name, col_name = {
            "cross": ("target", "source"),
            "decoder": ("target", "decoder input"),
            "encoder": ("source", "source"),
        }[kind]
        heatmap = attention_heatmap(
            weights, rows, cols, f"{KIND_NAMES[kind]}, {which}", row_name, col_name
        )
        words = pair.words("cross")  # (L, H, W_tgt + 1, W_src + 1), EOS last on both
        src_words, tgt_words = pair.src_words, pair.tgt_words
        # links join real words (no EOS row or column); shift: word t read from row t + 1
        cross = _pick(words, layer, head)[1:] if shift else _pick(words, layer, head)
        tgt_words = tgt_words[:-1] if shift else tgt_words
        inner = reading.matrix(words)
        linked = pair.linked_words  # EOS left out
        links = {(i, j): float(inner[j, i]) for i, j in reading.links(words, linked)}
        title = f"hard alignment, {EXTRACTION_TITLES[method]}, {reading.extraction.name} ({which})"
        lines = alignment_lines(links, *linked, title)
        stats = entropy_and_coverage(cross, src_words, tgt_words, f"cross-attention, {which}")
        return heatmap, lines, stats


EXTRACTION_TITLES = {
    "argmax": "each target word to its most attended source word",
    "grow-diag": "row and column maxima grown from their intersection",
}


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise UserError(f"reading {mode!r}: choose one of {', '.join(MODES)}")


def _pick(weights: Tensor, layer: int, head: int | None) -> Tensor:
    """(L, H, rows, keys) -> one layer's (rows, keys): one head, or the heads averaged."""
    chosen = weights[layer - 1]
    return chosen.mean(dim=0) if head is None else chosen[head - 1]


def head_choice(text: str | None) -> int | None:
    """The page's head choice: ``mean`` -> None, ``"2"`` -> 2."""
    if text is None or text == "mean":
        return None
    if not re.fullmatch(r"\d+", str(text)):
        raise UserError(f"head {text!r}: choose mean or a head number")
    return int(text)


__all__ = ["DEMO_EXAMPLES", "Explorer", "Hypothesis", "head_choice"]
