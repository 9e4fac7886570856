"""Hugging Face Transformers: export a trained run as a ``MarianMTModel`` directory.

The paper's Transformer is the architecture ``MarianMTModel`` implements: post-LN encoder and
decoder, sinusoidal positions, embeddings scaled by √d_model and tied with the output layer,
ReLU. So the export is exact, with three differences handled here rather than papered over:

- **positions.** Ours interleave sin and cos (``PE[:, 2i]`` sin, ``PE[:, 2i+1]`` cos); Marian's
  put every sin first, then every cos. Permuting the hidden dimensions turns one into the other,
  and the whole network with it: each weight that reads the hidden state has its input columns
  permuted, each that writes it its output rows, each LayerNorm its weight and bias. LayerNorm,
  residuals and the tied output layer do not care in which order the dimensions come, so the
  permuted model computes the same logits (``position_permutation``).
- **special tokens.** Our decoder starts from BOS (``decoder_start_token_id``), sources end with
  EOS (Marian's tokenizer appends it, as our batches do), padding is id 0, and the output layer
  has no bias (``final_logits_bias`` zero).
- **the tokenizer.** Our one joint SentencePiece model serves as Marian's source and target
  model, with a ``vocab.json`` that maps each piece to the id SentencePiece gives it.

Generation defaults (``generation_config.json``) are the run's: the beam size and length penalty
α its final evaluation chose on validation, else its ``decode`` config. Transformers divides a hypothesis's log-probability by ``length ** α``,
our ``decode.length_norm=power``; our default ``gnmt`` divides by ``((5 + length) / 6) ** α``,
which Transformers does not offer, so a beam can end on another hypothesis where two are
close (``docs/deploy.md`` has the measured share). The length limit is one for every input
(``max_length``), where ours is ``max_len_a · |x| + max_len_b``.

What Transformers cannot express exactly is refused before anything is written
(``unsupported``): a pre-LN run, learned positions, d_k ≠ d_model / h, untied embeddings.
Transformers comes with the ``hf`` extra: ``pip install -e ".[hf]"``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from transformer_mt.checkpoint import load_model
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import UserError
from transformer_mt.model import Transformer
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_mt.run_config import load_run_config, run_folder

TOKENIZER_FILE = "tokenizer.model"


def require_transformers():
    """The transformers module, or a UserError naming the extra to install."""
    try:
        import transformers
    except ImportError:
        raise UserError(
            'Hugging Face Transformers is not installed: pip install -e ".[hf]"'
        ) from None
    return transformers


def unsupported(model: Transformer) -> list[str]:
    """The settings of ``model`` that ``MarianMTModel`` cannot express (empty: it can)."""
    cfg = model.cfg
    reasons = []
    if cfg.norm_first:
        reasons.append(
            "model.norm_first=true: MarianMTModel is post-LN only (pre-LN has a final LayerNorm it lacks)"
        )
    if cfg.positional != "sinusoidal":
        reasons.append(
            f"model.positional={cfg.positional}: MarianMTModel's positions are fixed sinusoids"
        )
    if cfg.d_k is not None and cfg.d_k != cfg.head_dim:
        reasons.append(
            f"model.d_k={cfg.d_k} differs from d_model/h={cfg.head_dim}: MarianMTModel's heads "
            "use one width for queries, keys and values"
        )
    if not cfg.tie_embeddings:
        reasons.append(
            "model.tie_embeddings=false: the export ties Marian's embeddings and output layer"
        )
    if cfg.d_model % 2:
        reasons.append(f"model.d_model={cfg.d_model} is odd: the sin/cos halves do not pair up")
    return reasons


def position_permutation(d_model: int) -> torch.Tensor:
    """Marian's hidden dimension k is our dimension ``perm[k]``: our sin dimensions (even) first,
    then our cos dimensions (odd), as Marian lays its sinusoids out."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_config(model: Transformer):
    """A ``MarianConfig`` of ``model``'s shape and our special ids."""
    transformers = require_transformers()
    cfg = model.cfg
    return transformers.MarianConfig(
        vocab_size=cfg.vocab_size,
        decoder_vocab_size=cfg.vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.n_layers,
        decoder_layers=cfg.n_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function="relu",
        max_position_embeddings=cfg.max_positions,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=0.0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None,
    )


def marian_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under ``MarianMTModel``'s names, the hidden dimensions permuted
    (``position_permutation``)."""
    cfg = model.cfg
    perm = position_permutation(cfg.d_model)
    ours = {k: v.detach().float() for k, v in model.state_dict().items()}
    d = cfg.d_model
    out: dict[str, torch.Tensor] = {}

    def reads(weight: torch.Tensor) -> torch.Tensor:  # (out, D): input columns permuted
        return weight[:, perm].contiguous()

    def writes(tensor: torch.Tensor) -> torch.Tensor:  # (D, ...) or (D,): output rows permuted
        return tensor[perm].contiguous()

    def attention(theirs: str, prefix: str) -> None:
        weight, bias = ours[f"{prefix}.qkv.weight"], ours[f"{prefix}.qkv.bias"]
        for n, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[f"{theirs}.{name}.weight"] = reads(weight[n * d : (n + 1) * d])
            out[f"{theirs}.{name}.bias"] = bias[n * d : (n + 1) * d].clone()
        out[f"{theirs}.out_proj.weight"] = writes(ours[f"{prefix}.out.weight"])
        out[f"{theirs}.out_proj.bias"] = writes(ours[f"{prefix}.out.bias"])

    def norm(theirs: str, prefix: str) -> None:
        out[f"{theirs}.weight"] = writes(ours[f"{prefix}.norm.weight"])
        out[f"{theirs}.bias"] = writes(ours[f"{prefix}.norm.bias"])

    def ffn(theirs: str, prefix: str) -> None:
        out[f"{theirs}.fc1.weight"] = reads(ours[f"{prefix}.ffn.w1.weight"])
        out[f"{theirs}.fc1.bias"] = ours[f"{prefix}.ffn.w1.bias"].clone()
        out[f"{theirs}.fc2.weight"] = writes(ours[f"{prefix}.ffn.w2.weight"])
        out[f"{theirs}.fc2.bias"] = writes(ours[f"{prefix}.ffn.w2.bias"])

    embeddings = reads(ours["encoder.embed.tokens.weight"])
    out["model.shared.weight"] = embeddings
    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_tokens.weight"] = embeddings
        table = model.encoder.embed.positions.table.detach().float()
        out[f"model.{side}.embed_positions.weight"] = reads(table)
    out["lm_head.weight"] = embeddings
    out["final_logits_bias"] = torch.zeros(1, cfg.vocab_size)
    for n in range(cfg.n_layers):
        enc, ours_enc = f"model.encoder.layers.{n}", f"encoder.layers.{n}"
        attention(f"{enc}.self_attn", f"{ours_enc}.self_attn")
        norm(f"{enc}.self_attn_layer_norm", f"{ours_enc}.norm_attn")
        ffn(enc, ours_enc)
        norm(f"{enc}.final_layer_norm", f"{ours_enc}.norm_ffn")
        dec, ours_dec = f"model.decoder.layers.{n}", f"decoder.layers.{n}"
        attention(f"{dec}.self_attn", f"{ours_dec}.self_attn")
        norm(f"{dec}.self_attn_layer_norm", f"{ours_dec}.norm_self")
        attention(f"{dec}.encoder_attn", f"{ours_dec}.cross_attn")
        norm(f"{dec}.encoder_attn_layer_norm", f"{ours_dec}.norm_cross")
        ffn(dec, ours_dec)
        norm(f"{dec}.final_layer_norm", f"{ours_dec}.norm_ffn")
    return out


def to_marian(model: Transformer):
    """``model`` as a ``MarianMTModel`` (eval mode) computing the same logits."""
    reasons = unsupported(model)
    if reasons:
        raise UserError("cannot export to Transformers exactly: " + "; ".join(reasons))
    transformers = require_transformers()
    marian = transformers.MarianMTModel(marian_config(model))
    missing, unexpected = marian.load_state_dict(marian_state_dict(model), strict=False)
    if unexpected or missing:
        raise RuntimeError(
            f"Marian's weights do not match ours: missing {missing}, unexpected {unexpected}"
        )
    return marian.eval()


def generation_config(model: Transformer, beam_size: int = 4, length_penalty: float = 0.6):
    """The run's search (``decoding_settings``) in Transformers' ``GenerationConfig``; BOS and
    PAD are never generated, as in our search."""
    transformers = require_transformers()
    # the length penalty and early stopping rank a beam's hypotheses: greedy search has neither
    beam = {"length_penalty": length_penalty, "early_stopping": True} if beam_size > 1 else {}
    return transformers.GenerationConfig(
        num_beams=beam_size,
        **beam,
        max_length=model.cfg.max_positions,
        decoder_start_token_id=BOS_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        bad_words_ids=[[BOS_ID], [PAD_ID]],
    )


def decoding_settings(cfg, metrics: dict) -> tuple[int, float, str]:
    """Beam size, length penalty α and where they come from: the run's final evaluation (chosen
    on its validation set) if it made one, else its ``decode`` config."""
    final = metrics.get("final")
    if final:
        return (
            final["beam_size"],
            final["length_penalty"],
            "chosen on validation by the run's final evaluation",
        )
    decode = cfg.get("decode", {})
    return decode.get("beam_size", 1), decode.get("length_penalty", 0.6), "the run's decode config"


def write_tokenizer(
    tokenizer: Tokenizer, out: Path, source_lang: str, target_lang: str, max_length: int
) -> None:
    """Our SentencePiece model as Marian's source and target models, and its vocabulary.

    ``max_length``: the model's positions, the tokenizer's ``model_max_length``, so that
    ``tokenizer(text, truncation=True)`` cuts a long input to what the model reads.
    """
    sp = tokenizer.sp
    specials = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
    for id_, piece in specials.items():
        if sp.id_to_piece(id_) != piece:
            raise UserError(f"the tokenizer's id {id_} is {sp.id_to_piece(id_)!r}, not {piece!r}")
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(tokenizer.path, out / name)
    config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": source_lang,
        "target_lang": target_lang,
        "unk_token": "<unk>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "model_max_length": max_length,
        "separate_vocabs": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")


def export_hf(
    run_dir: str | Path,
    out: str | Path | None = None,
    average_last: int = 1,
    license: str = "other",
    repo_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``run_dir``'s model (its last ``average_last`` checkpoints averaged) as a directory
    that ``transformers`` loads with no code of ours: weights, config, generation config,
    tokenizer and a model card safe to publish (``model_card``). Returns the directory (default
    ``RUN_DIR/hf``). A folder that holds files already is refused unless ``overwrite``, which
    empties it first (no stale file from an earlier export stays)."""
    require_transformers()
    if not Path(run_dir).exists():
        raise UserError(f"{run_dir} does not exist: pass a run directory of scripts/train.py")
    run = run_folder(run_dir)
    if not (run / TOKENIZER_FILE).is_file():
        raise UserError(
            f"{run} has no {TOKENIZER_FILE}: export a run directory written by scripts/train.py"
        )
    out = Path(out) if out is not None else run / "hf"
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(
            f"{out} holds files already: pass --overwrite to replace them, or another --out"
        )
    model, tokenizer, checkpoints = load_model(run_dir, average_last=average_last)
    cfg = load_run_config(run)
    metrics_path = run / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    beam, alpha, _ = decoding_settings(cfg, metrics)
    marian = to_marian(model)  # refuses what Marian cannot express, before anything is written
    marian.generation_config = generation_config(model, beam, alpha)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    marian.save_pretrained(out)
    data = cfg.get("data", {})
    write_tokenizer(
        tokenizer,
        out,
        data.get("src_lang", "src"),
        data.get("tgt_lang", "tgt"),
        model.cfg.max_positions,
    )
    card = model_card(run, cfg, metrics, checkpoints, license, repo_id)
    (out / "README.md").write_text(card, encoding="utf-8")
    return out


# The settings that define a run's data, model, training and decoding; the card shows these
# and nothing else of its config (no machine's paths, caches or run directories).
CARD_KEYS = {
    "data": (
        "name",
        "source",
        "hf_path",
        "hf_config",
        "src_lang",
        "tgt_lang",
        "vocab_size",
        "max_len",
        "max_tokens",
        "train_subset",
        "license",
    ),
    "model": None,  # all
    "optim": None,
    "trainer": ("max_steps", "max_epochs", "max_time", "precision", "devices", "accumulate"),
    "decode": None,
    "final": None,
}


def _is_local_path(value) -> bool:
    text = str(value)
    return text.startswith(("/", "~", "\\")) or (len(text) > 2 and text[1:3] in (":\\", ":/"))


def card_settings(cfg) -> dict:
    """``CARD_KEYS`` of the run's config, any value that is a local path left out."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False) if not isinstance(cfg, dict) else cfg
    kept = {"seed": plain.get("seed")}
    for group, keys in CARD_KEYS.items():
        values = plain.get(group) or {}
        chosen = {k: v for k, v in values.items() if keys is None or k in keys}
        kept[group] = {k: v for k, v in chosen.items() if not _is_local_path(v)}
    return kept


def card_command(run: Path) -> str:
    """``python scripts/train.py`` with the run's overrides; a value that is a local path (or
    names a cache or run directory) becomes a placeholder."""
    words = ["python scripts/train.py"]
    for override in _overrides(run):
        key, _, value = override.partition("=")
        if key.lstrip("+~").split(".")[-1] in ("cache_dir", "output_dir") or key.startswith(
            "hydra."
        ):
            continue
        if _is_local_path(value) or key.endswith("local_dir"):
            value = "<path>"
        words.append(f"{key}={value}")
    return " ".join(words)


def model_card(
    run: Path,
    cfg,
    metrics: dict,
    checkpoints: list[Path],
    license: str = "other",
    repo_id: str | None = None,
) -> str:
    """The exported directory's README.md: a Hub YAML header (languages, licence, pipeline,
    the test scores as ``model-index``), then the data and its licence, the model, the scores,
    the search, the command that made it and the settings that define it (``card_settings``).
    No local path, cache or run directory of the machine that exported it is written."""
    import yaml
    from huggingface_hub import EvalResult, ModelCardData

    settings = card_settings(cfg)
    data, model = settings["data"], settings["model"]
    src, tgt = data.get("src_lang", "?"), data.get("tgt_lang", "?")
    name = data.get("name", "transformer-mt")
    beam, alpha, chosen_by = decoding_settings(cfg, metrics)
    results, lines = [], []
    final = metrics.get("final")
    if final:
        for split, scores in final["splits"].items():
            results.append(
                EvalResult(
                    task_type="translation",
                    dataset_type=name,
                    dataset_name=f"{name} {split}",
                    dataset_split=split,
                    metric_type="bleu",
                    metric_value=scores["bleu"],
                    metric_name="SacreBLEU",
                    metric_config=scores.get("bleu_signature"),
                )
            )
            extra = ", ".join(
                f"{key} {scores[key]}" for key in scores if key.startswith("bleu_tokenized")
            )
            lines.append(
                f"  - {split}: SacreBLEU **{scores['bleu']}**"
                + (f" ({extra})" if extra else "")
                + f", {scores['sentences']} sentences"
            )
        score = (
            f"{len(final['checkpoints'])} checkpoint(s) averaged, beam {final['beam_size']}, "
            f"α {final['length_penalty']} (chosen on validation), after "
            f"{metrics.get('steps', '?')} steps; SacreBLEU `{next(iter(final['splits'].values())).get('bleu_signature', '')}`:\n"
            + "\n".join(lines)
        )
    elif "test_bleu" in metrics:
        results.append(
            EvalResult(
                task_type="translation",
                dataset_type=name,
                dataset_name=f"{name} test",
                dataset_split="test",
                metric_type="bleu",
                metric_value=metrics["test_bleu"],
                metric_name="SacreBLEU",
                metric_config=metrics.get("test_bleu_signature"),
            )
        )
        score = (
            f"Test BLEU **{metrics['test_bleu']}** (SacreBLEU `{metrics.get('test_bleu_signature', '')}`), "
            f"chrF {metrics.get('test_chrf', 'not recorded')}, on {metrics.get('test_sentences', '?')} "
            f"sentences, greedy, after {metrics.get('steps', '?')} steps (the run's `metrics.json`)."
        )
    else:
        score = "The run recorded no test score (no `metrics.json`)."
    if name.startswith("demo"):
        score += (
            " The demo corpus is synthetic (generated by a grammar): a perfect model scores 100,"
            " and the figure says nothing about real text."
        )
    header = ModelCardData(
        language=[src, tgt],
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "marian", "transformer-mt"],
        model_name=repo_id or f"{name}-{src}-{tgt}",
        eval_results=results or None,
    ).to_yaml()
    where = repo_id or "<user>/<model>"  # the Hub id it is uploaded as, else a placeholder
    example = json.dumps(cfg.get("data", {}).get("example") or "...", ensure_ascii=False)
    shape = ", ".join(f"{k} {model.get(k)}" for k in ("n_layers", "d_model", "d_ff", "n_heads"))
    licence_note = (
        f"The weights are under `{license}` as exported (`--license`); they were trained on "
        f"`data={name}`, whose terms are: {data.get('license') or 'not recorded in the run'}. "
        "transformer-mt's code is MIT."
    )
    return f"""---
{header}
---

# {name}: {src} -> {tgt}

A Transformer (Vaswani et al. 2017) trained with transformer-mt and exported to
`MarianMTModel`: the same weights, the same logits.

```python
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

model = AutoModelForSeq2SeqLM.from_pretrained({json.dumps(where)})
tokenizer = AutoTokenizer.from_pretrained({json.dumps(where)})
batch = tokenizer([{example}], return_tensors="pt", truncation=True)  # at most {model.get("max_positions")} pieces
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

With Transformers 4.x, `pipeline("translation", model={json.dumps(where)})` works as well.

- **Data**: `data={name}` ({data.get("source", "?")} source). Terms: {data.get("license") or "not recorded"}.
- **Model**: `model={model.get("name", "?")}`: {shape}; post-LN, sinusoidal positions, tied
  embeddings.
- **Score**: {score}
- **Checkpoints**: {", ".join(p.name for p in checkpoints)} (averaged when several).
- **Generation**: beam {beam}, length penalty {alpha} ({chosen_by}; Transformers divides by
  length ** α).

How it was made (`<path>`: a folder of the machine that trained it):

```bash
{card_command(run)}
python scripts/export_hf.py <run> --average-last {len(checkpoints)}
```

The settings that define the run:

```yaml
{yaml.safe_dump(settings, sort_keys=False, allow_unicode=True).strip()}
```

Licence: {licence_note} Cite the paper and this code:

```bibtex
@inproceedings{{vaswani2017attention,
  title = {{Attention Is All You Need}},
  author = {{Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and Gomez, Aidan N. and Kaiser, Lukasz and Polosukhin, Illia}},
  booktitle = {{Advances in Neural Information Processing Systems}},
  year = {{2017}}
}}
```
and `CITATION.cff` of transformer-mt.
"""


def _overrides(run: Path) -> list[str]:
    """The command-line overrides the run was started with (Hydra's record), else none."""
    path = run / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.load(path)]
