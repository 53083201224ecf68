"""self_improving_rag: a self-correcting RAG engine that answers from your documents with a local model."""

__version__ = "0.1.0"


def entry() -> int:
    """The ``sirag`` console script. Ctrl-C while the program is still loading (before
    :func:`self_improving_rag.cli.main` handles it) ends quietly too, with exit code 130."""
    import sys

    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
