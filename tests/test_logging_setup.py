"""Console lines: warnings and errors read like the CLI's own messages."""

from __future__ import annotations

import logging

from self_improving_rag.logging_setup import OneLineFormatter, setup_logging


def _record(level: int, msg: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            info = sys.exc_info()
    return logging.LogRecord("sirag.memory", level, __file__, 1, msg, ("x",), info)


def test_warnings_and_errors_look_like_the_cli_messages() -> None:
    fmt = OneLineFormatter("%(levelname)s %(name)s: %(message)s")
    assert fmt.format(_record(logging.WARNING, "cache %s is damaged")) == "warning: cache x is damaged"
    assert fmt.format(_record(logging.ERROR, "cannot read %s", exc=True)) == "error: cannot read x"
    assert fmt.format(_record(logging.INFO, "loaded %s")) == "INFO sirag.memory: loaded x"


def test_console_warning_from_a_module_logger(tmp_path, capsys) -> None:
    setup_logging(str(tmp_path / "logs"))
    try:
        logging.getLogger("sirag.retrieval.index").warning("embedding cache %s cannot be written", "c.sqlite")
    finally:
        for h in list(logging.getLogger().handlers):
            logging.getLogger().removeHandler(h)
            h.close()
    err = capsys.readouterr().err
    assert err.strip() == "warning: embedding cache c.sqlite cannot be written"
    # The JSON log keeps level and logger.
    line = next((tmp_path / "logs").glob("*.jsonl")).read_text().splitlines()[-1]
    assert '"level": "WARNING"' in line and '"logger": "sirag.retrieval.index"' in line
