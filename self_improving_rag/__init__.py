"""self_improving_rag: a self-correcting RAG engine that answers from your documents with a local model."""

__version__ = "0.1.0"
