"""Chunk-length statistics per chunker and per document, with an optional histogram PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..retrieval.index import CorpusIndex


def _describe(values: list[int]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"count": 0, "mean": 0.0, "p10": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p = np.percentile(a, [10, 50, 90, 99])
    return {"count": int(len(a)), "mean": float(a.mean()), "p10": float(p[0]), "p50": float(p[1]),
            "p90": float(p[2]), "p99": float(p[3]), "max": float(a.max())}


def chunk_stats(index_dir: str | Path, png: str | Path | None = None) -> dict:
    """Token counts of chunks (embedder tokens) per chunker and per document."""
    index = CorpusIndex(index_dir)
    manifest = index.manifest()
    out: dict = {"index": str(index_dir), "chunkers": {}, "documents": {}}
    lengths: dict[str, list[int]] = {}
    for name in manifest.get("chunkers", {}):
        chunks = index.load_chunks(name)
        lengths[name] = [c.n_tokens for c in chunks]
        out["chunkers"][name] = _describe(lengths[name])
        per_doc: dict[str, list[int]] = {}
        for c in chunks:
            per_doc.setdefault(c.doc_id, []).append(c.n_tokens)
        out["documents"][name] = {d: _describe(v) for d, v in per_doc.items()}
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        for name, v in lengths.items():
            ax.hist(v, bins=40, alpha=0.5, label=f"{name} (n={len(v)})")
        ax.set_xlabel("tokens per chunk (embedder tokenizer)")
        ax.set_ylabel("chunks")
        ax.legend()
        fig.tight_layout()
        Path(png).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(str(png))
        plt.close(fig)
        out["png"] = str(png)
    return out
