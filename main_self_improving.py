"""Thin entry point: runs the same CLI as the ``sirag`` console script."""

import sys

from self_improving_rag.cli import main

if __name__ == "__main__":
    sys.exit(main())
