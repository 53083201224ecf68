"""Retrieval: embedder, persisted indexes, BM25, fusion, reranking and context refinement."""
