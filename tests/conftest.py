"""Shared fixtures: a small corpus written for these tests, fake-model configs and engines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from self_improving_rag.config import load_config
from self_improving_rag.retrieval.embedder import HashEmbedder

# The property tests check results, not speed: Hypothesis' default 200 ms deadline per example
# failed test_auroc_matches_pairwise_definition (276 ms, then 84 ms on the retry) on a machine
# busy with an evaluation, and CI machines are shared too.
settings.register_profile("sirag", deadline=None)
settings.load_profile("sirag")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# A tiny corpus written for the tests (no third-party text).
DOCS = {
    "harbour.md": """# The Harbour Town

## Chapter 1: The Lighthouse

The lighthouse of Marrow Point was built in 1852 by the engineer Clara Venn.
Its lamp burned whale oil until 1901, when the town council paid for a paraffin burner.
Keeper Tobias Lune kept the light for forty years and never missed a night.

## Chapter 2: The Storm

In the great storm of 1887 the schooner Greyling struck the Needle rocks.
Tobias Lune rowed out alone and saved eleven sailors from the wreck.
The council gave him a silver medal, which he kept in a tin box under his bed.

## Chapter 3: The Market

Every Thursday the fish market opens at dawn on the north quay.
Mrs. Alder sells smoked herring, and Dr. Pim buys two pounds each week for his cat.
The market bell was cast in Bristol and hangs above the harbour office.
""",
    "orchard.txt": """THE ORCHARD BOOK

CHAPTER I. THE TREES

The orchard behind the mill has sixty apple trees and nine pear trees.
The oldest tree, called the Grandmother, was planted by Ansel Brook in 1790.
Ansel Brook was the first miller of the valley and a stubborn man.

CHAPTER II. THE HARVEST

The harvest starts in late September, when the Russet apples turn gold.
Children from the village school help to pick the fruit for three days.
The cider is pressed in the old barn and stored in oak barrels.
""",
}


#: Set by .ci/run: what CI provides (../shared, the model packages) must be there, so a test
#: that needs it fails instead of skipping.
IN_CI = bool(os.environ.get("SIRAG_CI"))


def skip_or_fail(reason: str) -> None:
    """Skip on a developer machine that lacks ../shared or a model package; fail in CI."""
    if IN_CI:
        pytest.fail(f"{reason} (SIRAG_CI is set: CI must provide it)")
    pytest.skip(reason)


def write_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "docs")


def fake_overrides(tmp_path: Path) -> list[str]:
    """Settings that run the engine with the hash embedder and the scripted generator."""
    return [
        "embedder.name=hash-64",
        "embedder.max_tokens=256",
        "ingestion.fixed.size=40",
        "ingestion.fixed.overlap=8",
        "ingestion.section.max_tokens=60",
        "ingestion.section.min_tokens=5",
        "ingestion.semantic.max_tokens=60",
        "ingestion.semantic.min_tokens=5",
        "generator.backend=scripted",
        "scoring.judge=none",
        # The hand-set confidence weights and a raw bar of 0.5: the fakes' answers are not what the
        # shipped confidence model was fitted on (tests of the shipped model set it themselves).
        "loop.target_precision=null",
        # Hash bag-of-words cosines are lower than a trained embedder's: relevance turns at 0.15.
        "retrieval.relevance_midpoint=0.15",
        f"paths.index_dir={tmp_path / 'index'}",
        f"paths.memory_db={tmp_path / 'memory' / 'memory.db'}",
        f"paths.log_dir={tmp_path / 'logs'}",
    ]


def batch_overrides(tmp_path: Path) -> list[str]:
    """:func:`fake_overrides` for ``sirag batch`` and ``sirag eval`` runs that use the batch's own
    index folder (its ``index:``, else ``<output_dir>/<name>/index``) or ``--index``: there
    ``--set paths.index_dir=DIR`` means ``--index DIR``, so it is left out."""
    return [o for o in fake_overrides(tmp_path) if not o.startswith("paths.index_dir=")]


def main_in_process(argv: list[str]) -> int:
    """``sirag ARGV`` run in this process (``cli.main``), with the root logger's handlers and level
    as they were before: each command sets up logging to its own log folder, which must not
    outlive the call (its files would stay open, and later tests would log into them)."""
    import logging

    from self_improving_rag.cli import main

    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        return main(argv)
    finally:
        for h in root.handlers:
            if h not in saved[0]:
                h.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


@pytest.fixture
def fake_config(tmp_path: Path):
    return load_config(None, fake_overrides(tmp_path))


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder(dim=64)


@pytest.fixture
def built_index(fake_config, corpus_dir, hash_embedder):
    from self_improving_rag.ingestion.pipeline import ingest

    ingest([corpus_dir], fake_config, hash_embedder, progress=False)
    return Path(fake_config.paths.index_dir)


@pytest.fixture
def make_engine(fake_config, built_index, hash_embedder, tmp_path):
    """Engine factory with a scripted generator and a memory store in tmp_path."""
    from self_improving_rag.engine import Engine
    from self_improving_rag.generation.scripted import ScriptedGenerator
    from self_improving_rag.memory import MemoryStore

    made = []

    def make(replies, judge=None, config=None, memory=True, **kw):
        gen = ScriptedGenerator(replies, judge=judge)
        store = MemoryStore(tmp_path / "memory" / "memory.db") if memory else None
        eng = Engine(config or fake_config, embedder=hash_embedder, generator=gen, memory=store, **kw)
        made.append((eng, store))
        return eng, gen, store

    yield make
    for eng, store in made:
        eng.close()
        if store is not None:
            store.close()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "data").is_dir():
        skip_or_fail(f"shared data not found at {SHARED}: the slow tests need ../shared next to the repository")
    return SHARED


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
