"""``python -m self_improving_rag.cli``: the ``sirag`` command line."""

import sys

from .app import main

sys.exit(main())
