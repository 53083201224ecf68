"""Configuration: pydantic models loaded from YAML.

Layers, lowest first: the packaged ``configs/default.yaml`` < a user file given with
``--config`` < ``--set key=value`` overrides. Loading has no side effects: no
directories are created, nothing is seeded.

``models`` holds the settings' models, ``loading`` the layering and validation, ``overrides``
the ``--set`` items, ``removed`` the settings sirag no longer has, ``yaml_text`` the YAML reading.
"""

from .loading import config_from_dict, load_config, to_yaml
from .models import (CalibrationConfig, Config, EmbedderConfig, FixedChunkerConfig, GeneratorConfig, IngestionConfig,
                     LoopConfig, PathsConfig, PolicyConfig, RetrievalConfig, ScoringConfig, SectionChunkerConfig,
                     SemanticChunkerConfig, StrategyConfig, ThresholdsConfig, config_keys, no_yes_no_for_numbers)
from .overrides import _merge, parse_override, pins_strategy
from .removed import NO_EFFECT, REMOVED_KEYS, drop_removed
from .yaml_text import DuplicateKeyError, default_config_text, load_yaml_unique

__all__ = ["NO_EFFECT", "REMOVED_KEYS", "CalibrationConfig", "Config", "DuplicateKeyError", "EmbedderConfig",
           "FixedChunkerConfig", "GeneratorConfig", "IngestionConfig", "LoopConfig", "PathsConfig", "PolicyConfig",
           "RetrievalConfig", "ScoringConfig", "SectionChunkerConfig", "SemanticChunkerConfig", "StrategyConfig",
           "ThresholdsConfig", "_merge", "config_from_dict", "config_keys", "default_config_text", "drop_removed",
           "load_config", "load_yaml_unique", "no_yes_no_for_numbers", "parse_override", "pins_strategy", "to_yaml"]
