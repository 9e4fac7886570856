"""bertviz's interactive views (``head_view``, ``model_view``) of one sentence pair's attention:
encoder self-, decoder self- and cross-attention of every layer and head, in pieces or words.

bertviz comes with the ``bertviz`` extra (``pip install -e ".[bertviz]"``). Its pages load
require.js and d3 from a CDN, so the HTML needs a browser with internet access.

Labels follow bertviz's (and Hugging Face's) convention for encoder-decoder models: the
decoder side is labelled with the decoder's *input* tokens (``<s>``, then the target shifted
right), so a row is "the position whose input is this token" (it predicts the next one) in
both decoder self-attention and cross-attention. Our PNG heatmaps and the explorer label
cross-attention rows with the token produced instead.
"""

from __future__ import annotations

from transformer_mt.analysis.capture import PairAttention
from transformer_mt.errors import UserError

VIEWS = ("head", "model")


def require_bertviz():
    """The bertviz module, or a UserError naming the extra to install."""
    try:
        import bertviz
    except ImportError:
        raise UserError(
            'bertviz views need the bertviz extra: pip install -e ".[bertviz]"'
        ) from None
    return bertviz


def bertviz_arguments(pair: PairAttention, unit: str = "pieces") -> dict:
    """The attention and token arguments bertviz's encoder-decoder views take: one
    (1, H, rows, keys) tensor per layer for each kind, and the two token lists."""
    encoder_tokens, _ = pair.labels("encoder", unit)
    _, decoder_tokens = pair.labels("decoder", unit)  # the decoder's inputs: <s>, target[:-1]
    return {
        kind + "_attention": [layer[None] for layer in pair.view(kind, unit)]
        for kind in ("encoder", "decoder", "cross")
    } | {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}


def bertviz_html(pair: PairAttention, view: str = "head", unit: str = "pieces") -> str:
    """A standalone HTML page with bertviz's ``head_view`` or ``model_view`` of ``pair``."""
    if view not in VIEWS:
        raise UserError(f"unknown bertviz view {view!r}: use head or model")
    bertviz = require_bertviz()
    draw = bertviz.head_view if view == "head" else bertviz.model_view
    body = draw(**bertviz_arguments(pair, unit), html_action="return").data
    title = f"{view} view: {' '.join(pair.src_words[:-1])}"
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{_escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    )


def show(pair: PairAttention, view: str = "head", unit: str = "pieces") -> None:
    """Display bertviz's view of ``pair`` in a notebook cell."""
    if view not in VIEWS:
        raise UserError(f"unknown bertviz view {view!r}: use head or model")
    bertviz = require_bertviz()
    draw = bertviz.head_view if view == "head" else bertviz.model_view
    draw(**bertviz_arguments(pair, unit))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
