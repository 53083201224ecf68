"""The ``sirag`` command line, one module per command group: ``ingest`` (ingest, fetch-gutenberg,
stats), ``ask`` (ask, search), ``memory`` (its actions as subcommands), ``feedback``,
``calibrate`` and ``serve``; ``batch`` and ``eval`` are registered by
:mod:`self_improving_rag.batch`. ``common`` holds what they share: the common options, the
parser, the checks of the files a command writes, and how a failure becomes one line and an exit
code. Each command parses its arguments, makes one library call and formats the result; the
library holds the logic."""

from .app import main

__all__ = ["main"]
