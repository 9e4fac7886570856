"""Composing conf/: every preset builds, and bad input is refused with a message that helps."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError

from transformer_mt.config import DataConfig, TransformerConfig, check_keys

from .conftest import CONF

MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
DATA = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))
TRAINERS = sorted(p.stem for p in (CONF / "trainer").glob("*.yaml"))


def test_defaults_are_the_cpu_demo(compose_cfg) -> None:
    cfg = compose_cfg()
    assert (cfg.model.name, cfg.data.name, cfg.trainer.accelerator) == ("tiny", "demo_es_en", "cpu")
    assert cfg.optim.warmup < 4000  # scaled down for a short run


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("data", DATA)
def test_every_model_and_data_preset_composes_into_the_schema(
    compose_cfg, model: str, data: str
) -> None:
    cfg = compose_cfg(f"model={model}", f"data={data}")
    model_cfg = OmegaConf.to_object(cfg.model)
    assert isinstance(model_cfg, TransformerConfig) and model_cfg.name == model
    assert isinstance(OmegaConf.to_object(cfg.data), DataConfig)


def test_paper_presets_have_the_papers_values(compose_cfg) -> None:
    base = compose_cfg("model=base").model
    assert (base.n_layers, base.d_model, base.d_ff, base.n_heads, base.dropout) == (
        6,
        512,
        2048,
        8,
        0.1,
    )
    big = compose_cfg("model=big").model
    assert (big.n_layers, big.d_model, big.d_ff, big.n_heads, big.dropout) == (
        6,
        1024,
        4096,
        16,
        0.3,
    )
    optim = compose_cfg("model=base").optim
    assert (optim.warmup, list(optim.betas), optim.eps) == (4000, [0.9, 0.98], 1e-9)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_preset_composes(compose_cfg, trainer: str) -> None:
    assert compose_cfg(f"trainer={trainer}").trainer.accelerator in ("cpu", "gpu", "auto")


def test_unknown_key_is_an_error(compose_cfg) -> None:
    with pytest.raises(ConfigCompositionException, match="model.dmodel"):
        compose_cfg("model.dmodel=256")
    forced = compose_cfg("+model.dmodel=256")  # Hydra lets + through; check_keys does not
    with pytest.raises(
        ValueError, match=r"unknown config key 'model.dmodel'; model accepts: .*d_model"
    ):
        check_keys(forced)
    check_keys(compose_cfg())


def test_wrongly_typed_value_is_an_error(compose_cfg) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose_cfg("model.d_model=big")
    assert "d_model" in str(info.value.__cause__ or info.value)


@pytest.mark.parametrize(("group", "name"), [("model", "huge"), ("data", "wmt99")])
def test_unknown_preset_names_the_available_ones(compose_cfg, group: str, name: str) -> None:
    with pytest.raises(MissingConfigException) as info:
        compose_cfg(f"{group}={name}")
    message = str(info.value)
    assert f"Could not find '{group}/{name}'" in message
    assert all(option in message for option in (MODELS if group == "model" else DATA))


def test_invalid_values_are_refused_when_the_config_is_built(compose_cfg) -> None:
    cfg = compose_cfg("model.n_heads=3")
    with pytest.raises(ValueError, match=r"model.d_model=128 must be divisible by model.n_heads=3"):
        OmegaConf.to_object(cfg.model)


def test_attribute_typo_in_code_is_an_error(compose_cfg) -> None:
    cfg = compose_cfg()
    with pytest.raises(ConfigAttributeError):
        _ = cfg.model.dmodel
