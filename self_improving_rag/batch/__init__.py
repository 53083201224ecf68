"""YAML batch runs and the evaluation harness (``sirag batch``, ``sirag eval``).

A batch file names the corpus, the questions, config overrides and an optional grid; each
grid point is a run with its own folder holding ``results.jsonl`` (one line per question,
the ``sirag ask --json`` keys plus ``id`` and the gold fields), ``summary.json`` and the
resolved ``config.yaml``. Runs resume: questions already in ``results.jsonl`` are skipped,
and memory rows are keyed by (run, question id), so a killed run loses at most the question
in flight and never duplicates a row. A resume with settings that differ from the stored
``config.yaml`` (beyond ``resume._RESUME_FREE``) is refused rather than mixing two configurations,
and so is one whose questions have other text under the same ids (another dataset with the same
name); a summary grades with the dataset's current gold and leaves out ids it no longer has.

Modules: ``spec`` (the batch file), ``questions`` (its questions), ``settings`` (grid points
and each run's config), ``inputs`` (output, index and corpus folders), ``rundir`` (the results
file), ``resume`` (resume guards), ``run_memory`` (the fit a run is scored with, its gold
labels), ``runner`` (:func:`run_batch`), ``grading``, ``noloop`` (comparisons with the loop
off), ``report``, ``commands`` and ``arguments`` (the two commands).
"""

from .arguments import add_batch_commands, int_at_least
from .grading import grade, summarise
from .inputs import ensure_index, squad_corpus
from .noloop import derive_single_attempt_run, plain_attempt_row, single_attempt_row
from .questions import load_items
from .report import COMPARE_KEYS, markdown_table
from .rundir import append_row, read_done
from .runner import run_batch
from .settings import resolved_config
from .spec import BatchSpec, QuestionsSpec, load_batch

__all__ = ["COMPARE_KEYS", "BatchSpec", "QuestionsSpec", "add_batch_commands", "append_row",
           "derive_single_attempt_run", "ensure_index", "grade", "int_at_least", "load_batch", "load_items",
           "markdown_table", "plain_attempt_row", "read_done", "resolved_config", "run_batch", "single_attempt_row",
           "squad_corpus", "summarise"]
