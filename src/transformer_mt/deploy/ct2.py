"""CTranslate2: export a trained run to its model format, and translate with it.

``export_ct2(run, out)`` builds a ``ctranslate2.specs.TransformerSpec`` from our weights through
CTranslate2's converter API (post-LN or pre-LN, tied or separate embeddings, √d_model scaling,
our own position table passed as is: CTranslate2's built-in sinusoids interleave differently),
optionally quantizes it (int8, int8_float32, float16, bfloat16), and writes the model directory
with our ``tokenizer.model`` beside it. ``CT2Translator`` translates with that directory using
the same search options as ``transformer_mt.decoding.translate``.

CTranslate2 comes with the ``ct2`` extra: ``pip install -e ".[ct2]"``.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from transformer_mt.align.extract import hard_alignment
from transformer_mt.analysis.capture import to_words, word_groups
from transformer_mt.checkpoint import load_model
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.decoding.config import DecodeConfig
from transformer_mt.decoding.text import Translation, source_ids
from transformer_mt.errors import UserError
from transformer_mt.model import Transformer
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

log = logging.getLogger(__name__)
QUANTIZATIONS = ("int8", "int8_float32", "float16", "bfloat16", "float32")
TOKENIZER_FILE = "tokenizer.model"
INFO_FILE = "transformer_mt.json"


def require_ctranslate2():
    """The ctranslate2 module, or a UserError naming the extra to install."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError('CTranslate2 is not installed: pip install -e ".[ct2]"') from None
    return ctranslate2


def unsupported(model: Transformer) -> list[str]:
    """What in ``model`` CTranslate2's Transformer cannot represent (empty: it can)."""
    cfg = model.cfg
    reasons = []
    if cfg.d_k is not None and cfg.d_k != cfg.head_dim:
        reasons.append(
            f"model.d_k={cfg.d_k} differs from d_model/h={cfg.head_dim}: CTranslate2's attention "
            "uses one width per head for queries, keys and values"
        )
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.bias is None and name != "generator":
            reasons.append(
                f"{name} has no bias: CTranslate2's attention and FFN layers have biases"
            )
            break
    return reasons


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = weight.detach().float().cpu().numpy()
    if bias is not None:
        spec.bias = bias.detach().float().cpu().numpy()


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = norm.weight.detach().float().cpu().numpy()
    spec.beta = norm.bias.detach().float().cpu().numpy()


def _attention(spec, attention, cross: bool) -> None:
    """Our fused [W^Q; W^K; W^V] rows -> CTranslate2's layout: one fused matrix for self-attention,
    the query apart from the fused key/value for cross-attention."""
    weight, bias = attention.qkv.weight, attention.qkv.bias
    if cross:
        width = attention.qk_width
        _linear(spec.linear[0], weight[:width], None if bias is None else bias[:width])
        _linear(spec.linear[1], weight[width:], None if bias is None else bias[width:])
    else:
        _linear(spec.linear[0], weight, bias)
    _linear(spec.linear[-1], attention.out.weight, attention.out.bias)


def _ffn(spec, ffn, norm) -> None:
    _linear(spec.linear_0, ffn.w1.weight, ffn.w1.bias)
    _linear(spec.linear_1, ffn.w2.weight, ffn.w2.bias)
    _norm(spec.layer_norm, norm.norm)


def _inputs(spec, embed) -> None:
    """Token embeddings (scaled by √d_model, as ours) and our position table, row 0 first."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = embed.tokens.weight.detach().float().cpu().numpy()
    spec.scale_embeddings = True
    positions = embed.positions
    table = positions.table if hasattr(positions, "table") else positions.weight
    spec.position_encodings.encodings = table.detach().float().cpu().numpy()


def ct2_spec(model: Transformer, pieces: list[str]):
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``; ``pieces``: the joint
    vocabulary by id (``vocabulary(tokenizer)``), registered for both sides."""
    require_ctranslate2()  # a clear message when the extra is missing
    from ctranslate2.specs import common_spec, transformer_spec

    reasons = unsupported(model)
    if reasons:
        raise UserError("CTranslate2 cannot represent this model: " + "; ".join(reasons))
    cfg = model.cfg
    spec = transformer_spec.TransformerSpec.from_config(
        cfg.n_layers,
        cfg.n_heads,
        pre_norm=cfg.norm_first,
        activation=common_spec.Activation.RELU,
        alignment_layer=-1,  # the attention it returns: the last layer, every head averaged,
        alignment_heads=cfg.n_heads,  # as translate.py --alignments reads ours by default
    )
    encoder, decoder = spec.encoder, spec.decoder
    _inputs(encoder, model.encoder.embed)
    _inputs(decoder, model.decoder.embed)
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, cross=False)
        _norm(layer_spec.self_attention.layer_norm, layer.norm_attn.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.norm_ffn)
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, cross=False)
        _norm(layer_spec.self_attention.layer_norm, layer.norm_self.norm)
        _attention(layer_spec.attention, layer.cross_attn, cross=True)
        _norm(layer_spec.attention.layer_norm, layer.norm_cross.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.norm_ffn)
    if cfg.norm_first:  # pre-LN ends each stack with a LayerNorm
        _norm(encoder.layer_norm, model.encoder.final_norm)
        _norm(decoder.layer_norm, model.decoder.final_norm)
    _linear(decoder.projection, model.generator.weight, model.generator.bias)
    expected = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
    if len(pieces) != cfg.vocab_size or any(pieces[i] != p for i, p in expected.items()):
        raise UserError(
            f"a vocabulary of {len(pieces)} pieces starting {pieces[:4]} does not fit a model of "
            f"vocab_size={cfg.vocab_size} with special pieces {list(expected.values())}"
        )
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.add_source_eos = True  # our sources end with EOS; callers pass pieces only
    spec.config.decoder_start_token = "<s>"
    return spec


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The tokenizer's pieces by id: what CTranslate2 reads and writes."""
    return [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]


def export_ct2(
    run_dir: str | Path,
    output_dir: str | Path,
    average_last: int = 1,
    quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Write ``run_dir``'s model (its last N checkpoints averaged) as a CTranslate2 directory."""
    ctranslate2 = require_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UserError(f"quantization {quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    output_dir = Path(output_dir)
    if output_dir.exists() and not force:
        raise UserError(f"{output_dir} exists; pass --force to replace it")
    model, tokenizer, sources = load_model(run_dir, average_last=average_last)

    class _RunConverter(ctranslate2.converters.Converter):
        def _load(self):
            return ct2_spec(model, vocabulary(tokenizer))

    _RunConverter().convert(str(output_dir), quantization=quantization, force=True)
    shutil.copy(tokenizer.path, output_dir / TOKENIZER_FILE)
    info = {
        "run": str(Path(run_dir).resolve()),
        "checkpoints": [str(p) for p in sources],
        "quantization": quantization or "float32",
        "model": asdict(model.cfg),
    }
    (output_dir / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return output_dir


class CT2Translator:
    """Translate with an exported directory: the same options as ``decoding.translate``."""

    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        compute_type: str = "default",
        threads: int = 0,
    ) -> None:
        ctranslate2 = require_ctranslate2()
        self.model_dir = Path(model_dir)
        info_path = self.model_dir / INFO_FILE
        if not info_path.is_file():
            raise UserError(
                f"{self.model_dir} is not an export of scripts/export_ct2.py (no {INFO_FILE})"
            )
        self.info = json.loads(info_path.read_text(encoding="utf-8"))
        self.max_positions = int(self.info["model"]["max_positions"])
        self.tokenizer = Tokenizer(self.model_dir / TOKENIZER_FILE)
        self.translator = ctranslate2.Translator(
            str(self.model_dir), device=device, compute_type=compute_type, intra_threads=threads
        )

    def translate(
        self,
        sentences: list[str],
        cfg: DecodeConfig,
        n_best: int = 1,
        long_inputs: str = "truncate",
        attention: bool = False,
    ) -> list[list[Translation]] | tuple[list[list[Translation]], list[list[np.ndarray]]]:
        """The ``n_best`` translations of every sentence, in input order (and, with
        ``attention``, each hypothesis's (target, source) cross-attention as CTranslate2
        returns it: its alignment heads of the last layer, averaged)."""
        if cfg.beam_size > 1 and cfg.length_norm != "power":
            log.warning(
                "CTranslate2 ranks beam hypotheses by log p / |Y|^α (decode.length_norm=power), "
                "not by GNMT's ((5 + |Y|) / 6)^α: pass decode.length_norm=power (translate.py "
                "--length-norm power) for the same search on both engines"
            )
        ids = source_ids(self.tokenizer, sentences, self.max_positions, long_inputs)
        results: list[list[Translation]] = [[Translation("", [], 0.0)] for _ in sentences]
        weights: list[list[np.ndarray]] = [[] for _ in sentences]
        todo = [i for i, s in enumerate(sentences) if s.strip()]
        # our length rule is per sentence (a · |x| + b); CTranslate2 takes one limit per call,
        # so sentences are grouped by their limit (|x| counts EOS, as in decoding.state)
        limits = {i: int(cfg.max_len_a * len(ids[i]) + cfg.max_len_b) for i in todo}
        limits = {i: min(n, self.max_positions - 2) for i, n in limits.items()}
        groups: dict[int, list[int]] = {}
        for i in sorted(todo, key=lambda i: len(ids[i])):
            groups.setdefault(limits[i], []).append(i)
        for limit, members in groups.items():
            for start in range(0, len(members), cfg.batch_size):
                chunk = members[start : start + cfg.batch_size]
                pieces = [[self.tokenizer.sp.id_to_piece(t) for t in ids[i][:-1]] for i in chunk]
                found = self.translator.translate_batch(
                    pieces,
                    beam_size=cfg.beam_size,
                    num_hypotheses=n_best,
                    length_penalty=cfg.length_penalty,
                    max_decoding_length=limit,
                    return_scores=True,
                    return_attention=attention,
                    suppress_sequences=[["<pad>"], ["<s>"]],  # never emitted, as in ours
                    min_decoding_length=0,
                    max_input_length=0,  # source_ids has applied our rule
                )
                for i, result in zip(chunk, found):
                    tokens = [
                        [self.tokenizer.sp.piece_to_id(p) for p in hyp] for hyp in result.hypotheses
                    ]
                    texts = self.tokenizer.decode(tokens)
                    results[i] = [
                        Translation(text, toks, float(score))
                        for text, toks, score in zip(texts, tokens, result.scores)
                    ]
                    if attention:
                        weights[i] = [np.asarray(a) for a in result.attention]
        return (results, weights) if attention else results


def attention_links(
    tokenizer: Tokenizer, src_ids: list[int], tgt_ids: list[int], attention: np.ndarray
) -> set[tuple[int, int]]:
    """Word links (source i, target j) from CTranslate2's returned attention of one hypothesis.

    CTranslate2 returns (target pieces, source pieces) without the EOS row and column, the
    same weights as ours there; folded into words as ``translation_links`` folds ours.
    """

    weights = torch.as_tensor(np.asarray(attention, dtype=np.float32))
    src_pieces = [tokenizer.sp.id_to_piece(i) for i in src_ids]
    tgt_pieces = [tokenizer.sp.id_to_piece(i) for i in tgt_ids]
    if tuple(weights.shape) != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention of shape {tuple(weights.shape)} for {len(tgt_pieces)} target and "
            f"{len(src_pieces)} source pieces"
        )
    return hard_alignment(to_words(weights, word_groups(tgt_pieces), word_groups(src_pieces)))
