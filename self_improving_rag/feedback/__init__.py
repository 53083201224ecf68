"""Failure attribution, the repair catalogue and the memory-biased policy."""
