"""Generation: model registry, backends and prompts."""
