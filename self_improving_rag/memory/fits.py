"""What confidence calibration reads from the memory store and keeps in it.

The labelled answers a fit is made on (:meth:`Fits.labelled_attempts`, their count and the newest
label), the fits stored (:meth:`Fits.save_calibration`, :meth:`Fits.latest_calibration`), and the
automatic fits kept out (:meth:`Fits.save_kept_out`).
"""

from __future__ import annotations

from typing import Any

from .connection import StoreFile, _after, _dumps, _loads, _utcnow
from .verdicts import COLUMN_FEATURES, FEATURES_SQL, QUESTION_TOKENS_SQL, stored_features

#: ``if_latest`` left out (:meth:`Fits.save_calibration`): store the fit whatever is newest.
ANY_LATEST: Any = object()


class Fits(StoreFile):
    """The labelled answers calibration fits on, and the fits it stores."""

    def labelled_attempts(self) -> list[dict[str, Any]]:
        """The chosen attempt of every labelled answered outcome, for confidence calibration.

        Each dict: outcome_id, question_id, query_class, attempt, coverage, redundancy, grounding,
        faithfulness, confidence, refusal, mean_logprob, answer (the attempt's answer text, for
        the answer_words feature), failure, label (1 correct, 0 wrong; the latest feedback
        wins), source, then every other confidence feature but answer_words as the store holds it
        (:func:`verdicts.stored_features`; None where it was not recorded): question_fit (None
        where it was not read, or was read by its first version, which kept no question tokens),
        question_prior, dates_unstated (None for a question without a date), explanation,
        agreement (None where no replies were sampled), and corpus (the corpus it was answered
        from; None for outcomes recorded before corpora were). Signal values may be None.
        Refused outcomes are left out: confidence is the probability that a given answer is
        correct, and a label on a refusal ("rightly refused") says nothing about that.
        """
        rows = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT o.id AS outcome_id, o.question_id, o.query_class, a.number AS attempt,
                   a.coverage, a.redundancy, a.grounding, a.faithfulness, a.confidence,
                   a.refusal, a.mean_logprob, a.answer, a.failure, l.label, l.source,
                   {FEATURES_SQL} AS stored, {QUESTION_TOKENS_SQL} AS question_tokens, o.corpus
            FROM latest l
            JOIN outcomes o ON o.id = l.outcome_id
            JOIN attempts a ON a.outcome_id = o.id AND a.number = o.chosen_attempt
            WHERE l.rn = 1 AND o.refused = 0
            ORDER BY o.created_at, o.rowid  -- ties (one millisecond) in the order recorded, not by random id
            """
        )
        out = []
        for r in rows:
            features = stored_features(r, r.pop("stored"), r.pop("question_tokens"), r["answer"])
            corpus = r.pop("corpus")
            # answer_words is left to calibration, which reads it from the answer text.
            r.update({k: v for k, v in features.items() if k not in COLUMN_FEATURES and k != "answer_words"})
            out.append({**r, "corpus": corpus})
        return out

    def labelled_answers(self, since: str | None = None, after_label: int | None = None) -> int:
        """How many rows :meth:`labelled_attempts` returns, counted in SQL; with ``since`` (a
        ``created_at`` text), only outcomes whose label in use was given after that time; with
        ``after_label`` (a feedback row id, see :meth:`last_label_id`), only those whose label in
        use was written to this store after that row (given here, or merged in)."""
        row = self._one(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT COUNT(*) AS n
            FROM latest l
            JOIN feedback f ON f.id = l.id
            JOIN outcomes o ON o.id = l.outcome_id
            JOIN attempts a ON a.outcome_id = o.id AND a.number = o.chosen_attempt
            WHERE l.rn = 1 AND o.refused = 0 AND (:since IS NULL OR f.created_at > :since)
              AND (:after IS NULL OR f.id > :after)
            """,
            {"since": since, "after": after_label},
        )
        return int(row["n"]) if row else 0

    def last_label_id(self) -> int:
        """The id of the newest feedback row written to this store (0 for none). Rows are only
        appended, so a label written later, given here or merged in, has a higher id."""
        row = self._one("SELECT MAX(id) AS m FROM feedback")
        return int(row["m"]) if row and row["m"] is not None else 0

    def latest_calibration(self) -> dict[str, Any] | None:
        """The most recent calibration fit (weights and metrics parsed), or None. ``corpus_fits``
        maps a corpus to the fit made for it with this one (empty when there is none)."""
        return self._fit_of(self._one("SELECT * FROM calibration_fits ORDER BY created_at DESC, id DESC LIMIT 1"))

    def calibration_fit(self, fit_id: int) -> dict[str, Any] | None:
        """The calibration fit stored with id ``fit_id``, as :meth:`latest_calibration` gives it,
        or None when this store holds no such fit."""
        return self._fit_of(self._one("SELECT * FROM calibration_fits WHERE id = :id", {"id": int(fit_id)}))

    def save_kept_out(self, n: int, last_label_id: int, fit_id: int | None, reason: str) -> int:
        """Record an automatic calibration fit that was kept out (not stored): made on ``n``
        labelled answers when the store's newest label row was ``last_label_id``, while the fit
        ``fit_id`` (None: none) was in use, and why; returns its id. Not merged into other stores
        (its label id means nothing there)."""
        for name, value in (("n", n), ("last_label_id", last_label_id)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        row = {"created_at": _utcnow(), "n": n, "last_label_id": last_label_id,
               "fit_id": None if fit_id is None else int(fit_id), "reason": str(reason)}

        def write() -> int:
            with self._immediate() as db:
                cursor = self._insert(db, "calibration_kept_out", row)
            return int(cursor.lastrowid)

        return self._write(write)

    def latest_kept_out(self) -> dict[str, Any] | None:
        """The newest record of :meth:`save_kept_out` (``id``, ``created_at``, ``n``,
        ``last_label_id``, ``fit_id``, ``reason``), or None."""
        return self._one("SELECT * FROM calibration_kept_out ORDER BY id DESC LIMIT 1")

    @staticmethod
    def _fit_of(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        metrics = _loads(row.pop("metrics_json")) or {}
        for key in ("auroc_before", "auroc_after", "ece_before", "ece_after"):
            metrics.setdefault(key, row[key])
        return {
            "id": row["id"],
            "created_at": row["created_at"],
            "weights": _loads(row["weights_json"]),
            "n": row["n"],
            "metrics": metrics,
            "corpus_fits": _loads(row.get("corpus_fits_json")) or {},
        }

    def save_calibration(self, weights: dict, n: int, metrics: dict, corpus_fits: dict | None = None,
                         if_latest: Any = ANY_LATEST) -> int | None:
        """Store a fitted confidence calibration; returns its id.

        With ``if_latest`` (the id of the fit that was newest when the fit was decided on, None for
        no fit), the fit is stored only if that is still the newest: otherwise another process
        stored one meanwhile, nothing is written and None is returned.

        ``metrics`` keys ``auroc_before``, ``auroc_after``, ``ece_before``, ``ece_after``
        fill their columns; every metric is also kept in ``metrics_json``. ``corpus_fits`` maps a
        corpus to its own fit made with this one (``{"weights", "n", "l2", ...}``): the weights
        for questions on that corpus, ``weights`` for the others.
        """
        if not isinstance(weights, dict) or not weights:
            raise ValueError(f"weights must be a non-empty dict, got {weights!r}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        if not isinstance(metrics, dict):
            raise ValueError(f"metrics must be a dict, got {metrics!r}")
        for key, fit in (corpus_fits or {}).items():
            if not (isinstance(key, str) and isinstance(fit, dict) and isinstance(fit.get("weights"), dict)
                    and fit["weights"]):
                raise ValueError(f"corpus_fits must map a corpus name to a dict with weights, got {key!r}: {fit!r}")

        def metric(key: str) -> float | None:
            value = metrics.get(key)
            return None if value is None else float(value)

        row = {
            "created_at": _utcnow(),
            "weights_json": _dumps(weights),
            "n": n,
            "auroc_before": metric("auroc_before"),
            "auroc_after": metric("auroc_after"),
            "ece_before": metric("ece_before"),
            "ece_after": metric("ece_after"),
            "metrics_json": _dumps(metrics),
            "corpus_fits_json": _dumps(corpus_fits) if corpus_fits else None,
        }

        def write() -> int | None:
            with self._immediate() as db:
                if if_latest is not ANY_LATEST:
                    now_latest = db.execute("SELECT id FROM calibration_fits ORDER BY created_at DESC, id DESC "
                                            "LIMIT 1").fetchone()
                    if (now_latest[0] if now_latest else None) != if_latest:
                        return None
                # The fit in use is the newest by time. One merged from a machine whose clock runs
                # ahead would stay newer than any fit made here, which would then never be used
                # (and the engine would fit again at every start): a new fit is dated after it.
                newest = db.execute("SELECT MAX(created_at) FROM calibration_fits").fetchone()[0]
                row["created_at"] = _after(newest, row["created_at"])
                cursor = self._insert(db, "calibration_fits", row)
            return int(cursor.lastrowid)

        return self._write(write)


__all__ = ["ANY_LATEST", "Fits"]
