"""The attention explorer: a local Gradio page over ``Explorer`` (``scripts/explore.py RUN``).

Type or pick a source sentence; translate it greedily or with beam search (any of the n-best)
or teacher-force a given target; look at cross-, decoder self- and encoder self-attention of
any layer and head (or their mean) in words or pieces, hover a cell for its two words and
weight; see the hard alignment as lines and each word's entropy and coverage, in any reading
of cross-attention (the ``HeadReading`` modes causal, shift, full; a run opens on the head every
command reads unless told: its guided head, else its recorded best, else the last layer). Bad input is shown on the page as a
message. Gradio and Plotly come with the ``app`` extra.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import gradio as gr

from transformer_mt.align.extract import EXTRACTIONS
from transformer_mt.align.reading import MODES
from transformer_mt.app.session import Explorer, Hypothesis, head_choice
from transformer_mt.errors import UserError

log = logging.getLogger(__name__)
TARGETS = ("translate", "teacher-force")
KINDS = ("cross", "decoder", "encoder")
UNITS = ("words", "pieces")


class _Runs:
    """Loaded runs by path, shared by every page session (a model is loaded once)."""

    def __init__(self, average_last: int = 1) -> None:
        self.average_last = average_last
        self.loaded: dict[str, Explorer] = {}

    def get(self, run_dir: str) -> Explorer:
        key = str(Path(str(run_dir).strip()).expanduser())
        if key not in self.loaded:
            self.loaded[key] = Explorer(run_dir.strip(), self.average_last)
        return self.loaded[key]


def _error(err: Exception) -> str:
    return f"**{err}**"


def _opening_view(
    explorer: Explorer | None,
) -> tuple[list[str], str, list[str], str, str, str, str]:
    """Layer choices and value, head choices and value, mode, method, and a line about the
    run: it opens on the head every command reads unless told (``default_reading``)."""
    n_layers, n_heads = (explorer.n_layers, explorer.n_heads) if explorer else (1, 1)
    layers = [str(n) for n in range(1, n_layers + 1)]
    heads = ["mean", *(str(n) for n in range(1, n_heads + 1))]
    if explorer is None:
        return layers, layers[-1], heads, "mean", MODES[0], "argmax", ""
    about = f"loaded {explorer.run_dir}: {n_layers} layers x {n_heads} heads"
    opening = explorer.opening
    if explorer.guided is not None:
        about += f"; trained with align.guided: head {explorer.guided.name} (shown first)"
    head = "mean" if opening.head is None else str(opening.head)
    method = opening.extraction.method
    return layers, str(opening.layer), heads, head, opening.mode, method, about


def build_app(run_dir: str | Path, average_last: int = 1) -> gr.Blocks:
    """The page, for ``run_dir`` (another run can be loaded from the page)."""
    runs = _Runs(average_last)
    first, message = None, ""
    try:
        first = runs.get(str(run_dir))
    except UserError as err:
        message = _error(err)
    layers, layer_value, heads, head_value, reading_value, method_value, about = _opening_view(
        first
    )
    message = message or about
    examples = first.examples() if first else []

    with gr.Blocks(title="transformer-mt: attention explorer") as page:
        gr.Markdown(
            "## transformer-mt attention explorer\n"
            "Translate a sentence (or teacher-force a target), then look at every layer and "
            "head. Hover a cell for its two words and weight."
        )
        with gr.Row():
            run_box = gr.Textbox(value=str(run_dir), label="run directory", elem_id="run", scale=5)
            load = gr.Button("Load run", elem_id="load", scale=1)
        note = gr.Markdown(message, elem_id="message")
        with gr.Row():
            with gr.Column(scale=3):
                source = gr.Textbox(label="source sentence", lines=2, elem_id="source")
                example = gr.Dropdown(
                    choices=examples, value=None, label="examples", elem_id="examples"
                )
                mode = gr.Radio(list(TARGETS), value="translate", label="mode", elem_id="mode")
                target = gr.Textbox(label="target (teacher-force mode)", lines=1, elem_id="target")
                with gr.Row():
                    beam = gr.Slider(1, 8, value=1, step=1, label="beam size (1: greedy)")
                    n_best = gr.Slider(1, 8, value=1, step=1, label="n-best")
                go = gr.Button("Translate", variant="primary", elem_id="go")
            with gr.Column(scale=4):
                translation = gr.Textbox(
                    label="translation", interactive=False, elem_id="translation"
                )
                choice = gr.Radio(
                    [], label="n-best: pick a hypothesis", type="index", elem_id="hypotheses"
                )
                timing = gr.Markdown(elem_id="timing")
        with gr.Row():
            kind = gr.Radio(list(KINDS), value="cross", label="attention", elem_id="kind")
            layer = gr.Radio(layers, value=layer_value, label="layer", elem_id="layer")
            head = gr.Radio(heads, value=head_value, label="head", elem_id="head")
            unit = gr.Radio(list(UNITS), value="words", label="unit", elem_id="unit")
            reading = gr.Radio(
                list(MODES),
                value=reading_value,
                label="reading of cross-attention",
                info="causal: the row that predicts a word; shift: the row where it is the "
                "decoder's input; full: the decoder sees the whole target",
                elem_id="reading",
            )
            extract = gr.Radio(
                list(EXTRACTIONS),
                value=method_value,
                label="hard alignment",
                info="grow-diag at the run's tuned tau, either method with its tuned "
                "diagonal prior (scripts/align.py --tune-on)",
                elem_id="extract",
            )
        heatmap = gr.Plot(label="attention", elem_id="heatmap")
        with gr.Row():
            lines = gr.Plot(label="hard alignment", elem_id="alignment")
            stats = gr.Plot(label="entropy and coverage", elem_id="stats")
        # per page session: the run, the source ids, the hypotheses, the captured maps
        state = gr.State(None)

        views = [kind, layer, head, unit, extract, reading]  # the reading last: view[-1]
        figures = [heatmap, lines, stats]

        def draw(explorer: Explorer, pair, kind_, layer_, head_, unit_, extract_, reading_):
            return explorer.figures(
                pair, kind_, int(layer_), head_choice(head_), unit_, reading_, extract_
            )

        def on_translate(run, text, mode_, tgt, beam_, n_best_, *view):
            start = time.perf_counter()
            try:
                explorer = runs.get(run)
                if mode_ == "teacher-force":
                    src_ids, hyps = explorer.given(text, tgt)
                else:
                    src_ids, hyps = explorer.translate(
                        text, int(beam_), min(int(n_best_), int(beam_))
                    )
                pair = explorer.attention(src_ids, hyps[0], view[-1])
                drawn = draw(explorer, pair, *view)
            except UserError as err:
                return (_error(err), gr.skip(), gr.skip(), gr.skip(), *[gr.skip()] * 3, gr.skip())
            seconds = time.perf_counter() - start
            labels = [h.label(n) for n, h in enumerate(hyps, 1)]
            kept = {"run": run, "src_ids": src_ids, "hyps": hyps, "hyp": hyps[0], "pair": pair}
            kept["full"] = view[-1] == "full"  # how the pair was captured
            how = "given target" if mode_ == "teacher-force" else f"beam {int(beam_)}"
            return (
                _opening_view(explorer)[-1],  # the run, and its guided head
                hyps[0].text,
                gr.Radio(choices=labels, value=labels[0]),
                f"{how}: {seconds * 1000:.0f} ms (translation, attention, figures)",
                *drawn,
                kept,
            )

        def on_pick(kept, index, *view):
            if not kept or index is None:
                return ("", gr.skip(), *[gr.skip()] * 3, gr.skip())
            try:
                explorer = runs.get(kept["run"])
                hyp: Hypothesis = kept["hyps"][index]
                pair = explorer.attention(kept["src_ids"], hyp, view[-1])
                drawn = draw(explorer, pair, *view)
            except UserError as err:
                return (_error(err), gr.skip(), *[gr.skip()] * 3, gr.skip())
            full = view[-1] == "full"
            return (
                _opening_view(explorer)[-1],
                hyp.text,
                *drawn,
                {**kept, "hyp": hyp, "pair": pair, "full": full},
            )

        def on_view(kept, *view):
            if not kept:
                return ("", *[gr.skip()] * 3, gr.skip())
            try:
                explorer = runs.get(kept["run"])
                full = view[-1] == "full"
                if full != kept["full"]:  # captured the other way: capture again
                    pair = explorer.attention(kept["src_ids"], kept["hyp"], view[-1])
                    kept = {**kept, "pair": pair, "full": full}
                return (_opening_view(explorer)[-1], *draw(explorer, kept["pair"], *view), kept)
            except UserError as err:
                return (_error(err), *[gr.skip()] * 3, gr.skip())

        def on_load(run):
            try:
                explorer = runs.get(run)
            except UserError as err:
                return (_error(err), *[gr.skip()] * 5, None)
            new_layers, layer_, new_heads, head_, reading_, method_, about_ = _opening_view(
                explorer
            )
            return (
                about_,
                gr.Radio(choices=new_layers, value=layer_),
                gr.Radio(choices=new_heads, value=head_),
                gr.Radio(value=reading_),
                gr.Radio(value=method_),
                gr.Dropdown(choices=explorer.examples(), value=None),
                None,
            )

        inputs = [run_box, source, mode, target, beam, n_best, *views]
        outputs = [note, translation, choice, timing, *figures, state]
        quick = {"show_progress": "minimal"}  # no full-page overlay for sub-second answers
        go.click(on_translate, inputs, outputs, **quick)
        source.submit(on_translate, inputs, outputs, **quick)
        example.input(lambda text: text, [example], [source])
        choice.input(
            on_pick, [state, choice, *views], [note, translation, *figures, state], **quick
        )
        for control in views:
            control.input(on_view, [state, *views], [note, *figures, state], **quick)
        load.click(on_load, [run_box], [note, layer, head, reading, extract, example, state])
    return page


def launch(
    run_dir: str | Path,
    port: int | None = None,
    host: str = "127.0.0.1",
    average_last: int = 1,
    block: bool = True,
) -> gr.Blocks:
    """Build the page and serve it; ``block=False`` returns at once (tests; ``page.close()``)."""
    page = build_app(run_dir, average_last)
    page.launch(
        server_name=host,
        server_port=port,
        prevent_thread_lock=not block,
        inbrowser=False,
        quiet=not block,
        show_error=False,
    )
    return page
