"""Thin entry point: runs the same CLI as the ``sirag`` console script."""

import sys

from self_improving_rag import entry

if __name__ == "__main__":
    sys.exit(entry())
