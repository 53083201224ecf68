"""docs/configuration.md is what the config models say now, and every setting is described."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from self_improving_rag.config import Config, config_keys
from self_improving_rag.config_doc import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def _models(model: type[BaseModel] = Config):
    for field in model.model_fields.values():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield field.annotation
            yield from _models(field.annotation)


def test_every_setting_and_section_is_described() -> None:
    for model in _models():
        assert model.__doc__ and model.__doc__.strip(), f"{model.__name__} needs a docstring (its section's text)"
        for name, field in model.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                continue
            assert field.description and field.description.strip(), f"{model.__name__}.{name} needs a description"


def test_the_committed_configuration_doc_is_what_the_models_give() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date: python -m self_improving_rag.config_doc > docs/configuration.md")


def test_the_doc_lists_every_setting_once() -> None:
    text = render()
    for key in config_keys():
        assert text.count(f"| `{key}` |") == 1, key
    assert len(config_keys()) <= 60
