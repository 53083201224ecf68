"""Append-only schema migrations of the memory database.

Each migration is a function ``m00N_verb_noun(db)`` registered, in order, on
``MIGRATIONS`` (a ``sqlite_utils.Migrations`` set named ``"sirag"``; the names of
applied migrations are recorded in the ``_sqlite_migrations`` table). A migration
is never edited or removed after it lands: a schema change is a new function at
the end of this file. ``MemoryStore`` applies pending migrations when it opens a
database, so commands never call them directly.
"""

from __future__ import annotations

from sqlite_utils import Database, Migrations

MIGRATION_SET = "sirag"

MIGRATIONS = Migrations(MIGRATION_SET)


@MIGRATIONS()
def m001_create_tables(db: Database) -> None:
    """Create questions, outcomes, attempts, feedback, calibration_fits and outcome FTS."""
    db.execute(
        """
        CREATE TABLE questions (
            id TEXT PRIMARY KEY,
            text TEXT NOT NULL,
            query_class TEXT,
            first_seen TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE outcomes (
            id TEXT PRIMARY KEY,
            question_id TEXT NOT NULL REFERENCES questions(id),
            question TEXT NOT NULL,
            answer TEXT,
            refused INTEGER NOT NULL,
            refusal_reason TEXT,
            confidence REAL,
            query_class TEXT,
            chosen_attempt INTEGER,
            n_attempts INTEGER NOT NULL,
            first_strategy_key TEXT,
            final_strategy_key TEXT,
            success INTEGER,
            total_ms REAL,
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE attempts (
            id INTEGER PRIMARY KEY,
            outcome_id TEXT NOT NULL REFERENCES outcomes(id),
            number INTEGER NOT NULL,
            strategy_key TEXT NOT NULL,
            strategy_json TEXT NOT NULL,
            repair TEXT,
            failure TEXT NOT NULL,
            failure_reason TEXT,
            signals_json TEXT NOT NULL,
            coverage REAL,
            redundancy REAL,
            grounding REAL,
            faithfulness REAL,
            confidence REAL,
            refusal INTEGER NOT NULL,
            mean_logprob REAL,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            timings_json TEXT,
            total_ms REAL,
            answer TEXT,
            created_at TEXT NOT NULL,
            UNIQUE (outcome_id, number)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE feedback (
            id INTEGER PRIMARY KEY,
            outcome_id TEXT NOT NULL REFERENCES outcomes(id),
            label INTEGER NOT NULL CHECK (label IN (0, 1)),
            source TEXT NOT NULL CHECK (source IN ('user', 'gold')),
            note TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute(
        """
        CREATE TABLE calibration_fits (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            weights_json TEXT NOT NULL,
            n INTEGER NOT NULL,
            auroc_before REAL,
            auroc_after REAL,
            ece_before REAL,
            ece_after REAL
        )
        """
    )
    # The policy's counts filter attempts by strategy/failure and outcomes by
    # query class; analysis orders outcomes by time.
    db.execute("CREATE INDEX idx_outcomes_question ON outcomes(question_id)")
    db.execute("CREATE INDEX idx_outcomes_class ON outcomes(query_class)")
    db.execute("CREATE INDEX idx_outcomes_created ON outcomes(created_at)")
    db.execute("CREATE INDEX idx_attempts_strategy ON attempts(strategy_key)")
    db.execute("CREATE INDEX idx_attempts_failure ON attempts(failure)")
    db.execute("CREATE INDEX idx_feedback_outcome ON feedback(outcome_id)")
    # Porter stemming so "hounds" finds "hound"; triggers keep the index in step
    # with every insert, update and delete of an outcome.
    db["outcomes"].enable_fts(["question", "answer"], tokenize="porter", create_triggers=True)


@MIGRATIONS()
def m002_add_outcome_run_columns(db: Database) -> None:
    """Tie outcomes to a batch run item, so a resumed batch never records an item twice."""
    db.execute("ALTER TABLE outcomes ADD COLUMN run_id TEXT")
    db.execute("ALTER TABLE outcomes ADD COLUMN item_id TEXT")
    db.execute("ALTER TABLE outcomes ADD COLUMN features_json TEXT")
    # Partial: interactive questions have no run and must not collide on NULLs.
    db.execute(
        "CREATE UNIQUE INDEX idx_outcomes_run_item ON outcomes(run_id, item_id) "
        "WHERE run_id IS NOT NULL AND item_id IS NOT NULL"
    )


@MIGRATIONS()
def m003_add_calibration_metrics(db: Database) -> None:
    """Keep every metric of a calibration fit, not only the four fixed columns."""
    db.execute("ALTER TABLE calibration_fits ADD COLUMN metrics_json TEXT")


def migration_names() -> list[str]:
    """Names of the migrations this version of the program knows, in order."""
    # Every registered migration is pending on an empty database: this lists them
    # through the public API instead of the set's private list.
    with Database(memory=True, execute_plugins=False) as empty:
        return [m.name for m in MIGRATIONS.pending(empty)]


@MIGRATIONS()
def m004_add_corpus_columns(db: Database) -> None:
    """Tie each outcome to the corpus (index folder) it was answered from, and keep the
    per-corpus confidence fits made with a calibration fit. Outcomes recorded before stay NULL:
    their corpus is unknown."""
    db.execute("ALTER TABLE outcomes ADD COLUMN corpus TEXT")
    db.execute("ALTER TABLE calibration_fits ADD COLUMN corpus_fits_json TEXT")


@MIGRATIONS()
def m005_add_kept_out_fits(db: Database) -> None:
    """Record each automatic calibration fit kept out (worse than the default weights on held-out
    labels): with the store's newest label id then, so that the engine does not fit the same
    labels again at every start, and the fit in use then, so that a later fit or reset ends it."""
    db.execute(
        """
        CREATE TABLE calibration_kept_out (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            n INTEGER NOT NULL,
            last_label_id INTEGER NOT NULL,
            fit_id INTEGER REFERENCES calibration_fits(id),
            reason TEXT NOT NULL
        )
        """
    )
