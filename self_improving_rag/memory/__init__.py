"""The SQLite memory of answers: policy priors, calibration data and analysis."""

from .store import MemoryStore

__all__ = ["MemoryStore"]
