"""The memory store's analyses: what ``sirag memory stats``, ``strategies``, ``failures``,
``show``, ``search``, ``export`` and ``report`` read (read only).
"""

from __future__ import annotations

import csv
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..confidence import bin_index
from .connection import StoreFile, _loads

#: How the outcomes recorded without a corpus (by a version before corpora were recorded) are named.
NOT_RECORDED = "(not recorded)"

# Attempt columns holding JSON, and the keys they are parsed into by show() and export().
_JSON_COLUMNS = (("strategy_json", "strategy"), ("signals_json", "signals"), ("timings_json", "timings_ms"))
_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
#: A possessive or contraction ending ("Holmes's", "don't" stays): its lone letter would have to
#: occur as a word of its own, so "lighthouse's" would miss a question that says "lighthouse".
_POSSESSIVE_RE = re.compile(r"(?<=\w)['’]s\b", re.UNICODE)
# FTS5 query strings grow with every token; a pasted page must not become a huge query (more
# different words than this are refused: every word must occur, so none may be left out).
_MAX_SEARCH_TOKENS = 64
_SQLITE_MAX_INT = 2**63 - 1
_MAX_LABEL_IDS = 500  # current_labels: ids read at once (SQLite's bound parameters are limited)


def search_words(text: str) -> list[str]:
    """The words :meth:`MemoryStore.search` looks for in ``text``: runs of letters and digits, a
    possessive "'s" dropped, a word repeated (in any case) once; [] when it holds none (only
    punctuation, quotes or FTS operators such as ``*``)."""
    words = _TOKEN_RE.findall(_POSSESSIVE_RE.sub("", text))
    return list({w.casefold(): w for w in words}.values())


def _remove_quietly(path: Path) -> None:
    """Remove a temporary file if it is there. Never raises: on a read-only file system even removing
    a file that was never made fails (EROFS, not ENOENT), and that error would replace the one that
    says why the file could not be written, naming the temporary file instead of the user's."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _rate(successes: int, total: int) -> float | None:
    return successes / total if total else None




class Analysis(StoreFile):
    """Read-only analyses of what the store holds."""

    def _count(self, sql: str) -> dict[str, Any]:
        # Aggregates without GROUP BY always return exactly one row.
        return self._rows(sql)[0]

    def stats(self) -> dict[str, Any]:
        """Totals: questions, outcomes, answered, refused, attempts, rates and feedback counts, and
        the outcomes of each corpus (``corpora``; "(not recorded)" for those recorded before corpora were)."""
        o = self._count(
            """
            SELECT COUNT(*) AS outcomes,
                   COALESCE(SUM(refused = 0 AND answer IS NOT NULL), 0) AS answered,
                   COALESCE(SUM(refused), 0) AS refused,
                   COALESCE(SUM(success), 0) AS successes,
                   AVG(confidence) AS mean_confidence
            FROM outcomes
            """
        )
        q = self._count("SELECT COUNT(*) AS n FROM questions")
        # Outcomes recorded without attempts (possible through the API) do not lower the mean.
        a = self._count("SELECT COUNT(*) AS n, COUNT(DISTINCT outcome_id) AS outcomes, AVG(total_ms) AS ms FROM attempts")
        first = self._count(
            """
            SELECT COUNT(*) AS n, COALESCE(SUM(a.failure = 'NONE'), 0) AS ok FROM attempts a
            WHERE a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = a.outcome_id)
            """
        )
        # total, user and gold count label rows; correct and wrong count outcomes by their latest label.
        f = self._count(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT COUNT(*) AS total,
                   COALESCE(SUM(f.source = 'user'), 0) AS user, COALESCE(SUM(f.source = 'gold'), 0) AS gold,
                   COUNT(DISTINCT f.outcome_id) AS labelled_outcomes,
                   (SELECT COUNT(*) FROM latest WHERE rn = 1 AND label = 1) AS correct,
                   (SELECT COUNT(*) FROM latest WHERE rn = 1 AND label = 0) AS wrong
            FROM feedback f
            """
        )
        n_out = int(o["outcomes"])
        n_att = int(a["n"])
        return {
            "questions": int(q["n"]),
            "outcomes": n_out,
            "answered": int(o["answered"]),
            "refused": int(o["refused"]),
            "successes": int(o["successes"]),
            "success_rate": _rate(int(o["successes"]), n_out),
            "mean_confidence": o["mean_confidence"],
            "attempts": n_att,
            "mean_attempts": n_att / int(a["outcomes"]) if int(a["outcomes"]) else None,
            "mean_attempt_ms": a["ms"],
            "first_attempt_success_rate": _rate(int(first["ok"]), int(first["n"])),
            "feedback": {k: int(v) for k, v in f.items()},
            "corpora": {r["corpus"] if r["corpus"] is not None else NOT_RECORDED: int(r["n"]) for r in self._rows(
                "SELECT corpus, COUNT(*) AS n FROM outcomes GROUP BY corpus ORDER BY COUNT(*) DESC, corpus")},
        }

    def strategies(self) -> list[dict[str, Any]]:
        """Per strategy key over all attempts: attempts, successes (attribution NONE: the engine's own
        verdict), success_rate, mean confidence and ms; ``labelled`` answers given by that strategy
        that carry a label, and ``labelled_right_rate`` among them (the current label)."""
        rows = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT a.strategy_key, COUNT(*) AS attempts, SUM(a.failure = 'NONE') AS successes,
                   AVG(a.confidence) AS mean_confidence, AVG(a.total_ms) AS mean_total_ms,
                   COUNT(l.label) AS labelled, SUM(l.label) AS labelled_right
            FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
            LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1 AND a.number = o.chosen_attempt
            GROUP BY a.strategy_key ORDER BY attempts DESC, a.strategy_key
            """
        )
        for r in rows:
            r["success_rate"] = _rate(int(r["successes"]), int(r["attempts"]))
            r["labelled_right_rate"] = _rate(int(r.pop("labelled_right") or 0), int(r["labelled"]))
        return rows

    def _followups(self) -> list[dict[str, Any]]:
        return self._rows(
            """
            WITH seq AS (
                SELECT repair, failure,
                       LAG(failure) OVER (PARTITION BY outcome_id ORDER BY number) AS prev_failure
                FROM attempts
            )
            SELECT prev_failure, repair, COUNT(*) AS uses, SUM(failure = 'NONE') AS successes
            FROM seq WHERE prev_failure IS NOT NULL AND repair IS NOT NULL
            GROUP BY prev_failure, repair
            """
        )

    def failures(self) -> list[dict[str, Any]]:
        """Per failure type (not NONE): count, share of all attempts, top following repair and its success rate."""
        total = int(self._count("SELECT COUNT(*) AS n FROM attempts")["n"])
        rows = self._rows(
            "SELECT failure, COUNT(*) AS count FROM attempts WHERE failure != 'NONE' "
            "GROUP BY failure ORDER BY count DESC, failure"
        )
        best: dict[str, dict[str, Any]] = {}
        for f in self._followups():
            cur = best.get(f["prev_failure"])
            key = (f["uses"], f["successes"], f["repair"])
            if cur is None or key > (cur["uses"], cur["successes"], cur["repair"]):
                best[f["prev_failure"]] = f
        for r in rows:
            r["share"] = _rate(int(r["count"]), total)
            top = best.get(r["failure"])
            r["top_repair"] = top["repair"] if top else None
            r["top_repair_uses"] = int(top["uses"]) if top else 0
            r["top_repair_success_rate"] = _rate(int(top["successes"]), int(top["uses"])) if top else None
        return rows

    def show(self, outcome_id_or_prefix: str) -> dict[str, Any]:
        """One outcome with its attempts (JSON columns parsed), feedback rows and ``current_label``
        (the label in use: label, source, note, created_at; None when unlabelled); accepts a ≥ 6-char
        prefix."""
        oid = self._resolve(outcome_id_or_prefix)
        outcome = self._rows("SELECT * FROM outcomes WHERE id = ?", (oid,))[0]
        outcome["features"] = _loads(outcome.pop("features_json", None))
        attempts = self._rows("SELECT * FROM attempts WHERE outcome_id = ? ORDER BY number", (oid,))
        for a in attempts:
            for col, key in _JSON_COLUMNS:
                a[key] = _loads(a.pop(col))
        outcome["attempts"] = attempts
        outcome["feedback"] = self._rows("SELECT * FROM feedback WHERE outcome_id = ? ORDER BY created_at, id",
                                         (oid,))
        outcome["current_label"] = self._one(
            f"WITH {self._LATEST_LABEL} SELECT f.label, f.source, f.note, f.created_at FROM latest l "
            "JOIN feedback f ON f.id = l.id WHERE l.outcome_id = ? AND l.rn = 1", (oid,))
        return outcome

    def search(self, text: str, limit: int = 20) -> list[dict[str, Any]]:
        """Full-text search of questions and answers, best match first.

        Every word of ``text`` must occur (porter stemming; a possessive "'s" is dropped); FTS
        operators and quotes in the input are treated as plain words, so no input can break the query.
        A word repeated (in any case) counts once; more than ``_MAX_SEARCH_TOKENS`` different words
        are an InputError, not a query cut short (which would find outcomes without the words cut).
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {text!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        tokens = search_words(text)
        if not tokens:
            return []
        if len(tokens) > _MAX_SEARCH_TOKENS:
            raise InputError(f"the search text has {len(tokens)} different words; it reads at most "
                             f"{_MAX_SEARCH_TOKENS}, and every word must occur in a match: search with fewer words")
        # Each token is a quoted FTS5 string; \w+ tokens never contain a quote.
        match = " ".join(f'"{t}"' for t in tokens)
        return self._rows(
            """
            SELECT o.id, o.question, o.answer, o.refused, o.confidence, o.query_class, o.created_at,
                   snippet(outcomes_fts, -1, '[', ']', '...', 12) AS snippet
            FROM outcomes_fts JOIN outcomes o ON o.rowid = outcomes_fts.rowid
            WHERE outcomes_fts MATCH ?
            ORDER BY bm25(outcomes_fts), o.created_at DESC
            LIMIT ?
            """,
            (match, min(limit, _SQLITE_MAX_INT)),  # a larger int does not fit SQLite's (OverflowError)
        )

    def recent(self, limit: int = 20, offset: int = 0) -> dict[str, Any]:
        """A page of outcomes, newest first: ``total`` outcomes, and ``outcomes`` from ``offset``
        on (at most ``limit``), each with its attempt count and current label (1, 0 or None)."""
        for name, value, low in (("limit", limit, 1), ("offset", offset, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        rows = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT o.id, o.question, o.answer, o.refused, o.confidence, o.query_class, o.n_attempts,
                   o.created_at, l.label
            FROM outcomes o LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1
            ORDER BY o.created_at DESC, o.rowid DESC LIMIT ? OFFSET ?
            """,
            (min(limit, _SQLITE_MAX_INT), min(offset, _SQLITE_MAX_INT)),
        )
        return {"total": int(self._count("SELECT COUNT(*) AS n FROM outcomes")["n"]), "outcomes": rows}

    def current_labels(self, outcome_ids: list[str]) -> dict[str, int]:
        """The current label (1 right, 0 wrong) of each of ``outcome_ids`` that has one."""
        ids = list(dict.fromkeys(outcome_ids))[:_MAX_LABEL_IDS]
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = self._rows(f"WITH {self._LATEST_LABEL} SELECT outcome_id, label FROM latest "
                          f"WHERE rn = 1 AND outcome_id IN ({marks})", tuple(ids))
        return {r["outcome_id"]: int(r["label"]) for r in rows}

    def _export_rows(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        ocols = [r["name"] for r in self._rows("SELECT name FROM pragma_table_info('outcomes') ORDER BY cid")]
        acols = [r["name"] for r in self._rows("SELECT name FROM pragma_table_info('attempts') ORDER BY cid")]
        select = ", ".join([f"o.{c} AS outcome_{c}" for c in ocols]
                           + ["l.label AS outcome_label", "l.source AS outcome_label_source"]
                           + [f"a.{c} AS attempt_{c}" for c in acols])
        rows = self._rows(
            f"WITH {self._LATEST_LABEL} SELECT {select} FROM outcomes o "
            "LEFT JOIN latest l ON l.outcome_id = o.id AND l.rn = 1 LEFT JOIN attempts a ON a.outcome_id = o.id "
            "ORDER BY o.created_at, o.rowid, a.number"
        )
        return [*ocols, "label", "label_source"], acols, rows

    def export_records(self) -> list[dict]:
        """The outcomes with their attempts, as :meth:`export` writes them in JSON."""
        ocols, acols, rows = self._export_rows()
        return self._nest(ocols, acols, rows)

    def export(self, fmt: str, path: str | Path) -> int:
        """Write outcomes joined with their attempts to ``path``; returns the number of outcomes.

        'csv': one row per attempt, columns ``outcome_*`` and ``attempt_*``.
        'json': a list of outcomes, each with its ``attempts`` (JSON columns parsed).
        Each outcome carries its current label (``label`` 1/0 and ``label_source``; empty when
        unlabelled).
        """
        return self.export_files([(fmt, path)])

    def export_files(self, targets: list[tuple[str, str | Path]]) -> int:
        """Write several exports (``(fmt, path)`` pairs, formats as in :meth:`export`) from one
        reading of the store, all or nothing: each is written to a temporary file beside its target,
        and the temporaries are renamed into place only once every one was written (and removed
        when one was not), so a failed export never leaves half a file, nor one file of two.
        Returns the number of outcomes."""
        for fmt, _ in targets:
            if fmt not in ("csv", "json"):
                raise ValueError(f"fmt must be 'csv' or 'json', got {fmt!r}")
        ocols, acols, rows = self._export_rows()
        n_outcomes = len({r["outcome_id"] for r in rows})
        staged: list[tuple[Path, Path]] = []  # (temporary, target)
        try:
            for fmt, target in targets:
                path = Path(target)
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
                    staged.append((tmp, path))
                    with tmp.open("w", encoding="utf-8", newline="") as fh:
                        if fmt == "csv":
                            fields = [f"outcome_{c}" for c in ocols] + [f"attempt_{c}" for c in acols]
                            writer = csv.DictWriter(fh, fieldnames=fields)
                            writer.writeheader()
                            writer.writerows(rows)
                        else:
                            json.dump(self._nest(ocols, acols, rows), fh, ensure_ascii=False, indent=1)
                except OSError as exc:  # name the file the user asked for, not the temporary one
                    raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
            done: list[Path] = []
            for tmp, path in staged:
                try:
                    os.replace(tmp, path)
                except OSError as exc:  # seldom (the folder was writable a moment ago): say what was written
                    written = f" ({', '.join(map(str, done))} was written all the same)" if done else ""
                    raise type(exc)(exc.errno, f"{exc.strerror or exc}{written}", str(path)) from exc
                done.append(path)
        finally:
            for tmp, _ in staged:
                _remove_quietly(tmp)
        return n_outcomes

    @staticmethod
    def _nest(ocols: list[str], acols: list[str], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            oid = r["outcome_id"]
            if oid not in out:
                outcome = {c: r[f"outcome_{c}"] for c in ocols}
                outcome["features"] = _loads(outcome.pop("features_json", None))
                outcome["attempts"] = []
                out[oid] = outcome
            if r["attempt_id"] is None:
                continue
            attempt = {c: r[f"attempt_{c}"] for c in acols}
            for col, key in _JSON_COLUMNS:
                attempt[key] = _loads(attempt.pop(col))
            out[oid]["attempts"].append(attempt)
        return list(out.values())

    def learning_curve(self, window: int = 20) -> list[dict[str, Any]]:
        """Outcomes in time order with rolling first-attempt success and outcome success.

        Each point: index (1-based), outcome_id, created_at, first_success (0/1),
        rolling_first_success and rolling_success over the last ``window`` outcomes.
        """
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        rows = self._rows(
            """
            SELECT o.id AS outcome_id, o.created_at, o.success, o.n_attempts,
                   (a.failure = 'NONE') AS first_success
            FROM outcomes o JOIN attempts a ON a.outcome_id = o.id
            WHERE a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = o.id)
            ORDER BY o.created_at, o.rowid
            """
        )
        points = []
        for i, r in enumerate(rows):
            recent = rows[max(0, i - window + 1) : i + 1]
            points.append(
                {
                    "index": i + 1,
                    "outcome_id": r["outcome_id"],
                    "created_at": r["created_at"],
                    "n_attempts": r["n_attempts"],
                    "first_success": int(r["first_success"]),
                    "rolling_first_success": sum(int(x["first_success"]) for x in recent) / len(recent),
                    "rolling_success": sum(int(x["success"] or 0) for x in recent) / len(recent),
                }
            )
        return points

    def strategy_by_class(self) -> list[dict[str, Any]]:
        """First attempts per (query_class, strategy_key): attempts, successes, success_rate."""
        rows = self._rows(
            """
            SELECT COALESCE(o.query_class, 'other') AS query_class, a.strategy_key,
                   COUNT(*) AS attempts, SUM(a.failure = 'NONE') AS successes
            FROM attempts a JOIN outcomes o ON o.id = a.outcome_id
            WHERE a.number = (SELECT MIN(f.number) FROM attempts f WHERE f.outcome_id = a.outcome_id)
            GROUP BY 1, 2 ORDER BY 1, 3 DESC
            """
        )
        for r in rows:
            r["success_rate"] = _rate(int(r["successes"]), int(r["attempts"]))
        return rows

    def failure_timeline(self, buckets: int = 10) -> list[dict[str, Any]]:
        """Attempts in time order cut into up to ``buckets`` equal groups, with failure counts per group."""
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
            raise ValueError(f"buckets must be a positive int, got {buckets!r}")
        rows = self._rows("SELECT failure, created_at FROM attempts ORDER BY created_at, id")
        n = len(rows)
        k = min(buckets, n)
        out = []
        for b in range(k):
            part = rows[b * n // k : (b + 1) * n // k]
            counts: dict[str, int] = {}
            for r in part:
                counts[r["failure"]] = counts.get(r["failure"], 0) + 1
            out.append(
                {"bucket": b + 1, "start": part[0]["created_at"], "end": part[-1]["created_at"],
                 "n": len(part), "counts": counts}
            )
        return out

    def confidence_histogram(self, bins: int = 10) -> dict[str, Any]:
        """Outcome confidences in ``bins`` equal bins over [0, 1], split into answered and refused."""
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise ValueError(f"bins must be a positive int, got {bins!r}")
        answered = [0] * bins
        refused = [0] * bins
        for r in self._rows("SELECT confidence, refused FROM outcomes WHERE confidence IS NOT NULL"):
            i = bin_index(float(r["confidence"]), bins)  # clipped to the first and last bin
            (refused if r["refused"] else answered)[i] += 1
        return {"edges": [i / bins for i in range(bins + 1)], "answered": answered, "refused": refused}

    def reliability(self, bins: int = 10) -> dict[str, Any]:
        """Outcome confidence bins against observed accuracy, with the expected calibration error.

        Answered outcomes only (confidence is the probability that an answer is correct). The
        target is the latest feedback label when any answered outcome has one
        (``target='feedback'``); otherwise the chosen attempt's own verdict, failure ==
        'NONE' (``target='self-assessed'``). Outcome ``success`` is not used: it is
        derived from confidence and would make the diagram trivially a step.
        """
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
            raise ValueError(f"bins must be a positive int, got {bins!r}")
        labelled = self._rows(
            f"""
            WITH {self._LATEST_LABEL}
            SELECT o.confidence, l.label AS y FROM latest l JOIN outcomes o ON o.id = l.outcome_id
            WHERE l.rn = 1 AND o.confidence IS NOT NULL AND o.refused = 0
            """
        )
        target = "feedback"
        pairs = labelled
        if not pairs:
            target = "self-assessed"
            pairs = self._rows(
                """
                SELECT o.confidence, (a.failure = 'NONE') AS y FROM outcomes o
                JOIN attempts a ON a.outcome_id = o.id AND a.number = o.chosen_attempt
                WHERE o.confidence IS NOT NULL AND o.refused = 0
                """
            )
        groups: list[list[tuple[float, int]]] = [[] for _ in range(bins)]
        for p in pairs:
            c = min(1.0, max(0.0, float(p["confidence"])))
            groups[bin_index(c, bins)].append((c, int(p["y"])))
        out_bins = []
        ece = 0.0
        for i, g in enumerate(groups):
            mean_c = sum(c for c, _ in g) / len(g) if g else None
            acc = sum(y for _, y in g) / len(g) if g else None
            if g:
                ece += len(g) / len(pairs) * abs(acc - mean_c)  # type: ignore[operator]
            out_bins.append(
                {"lo": i / bins, "hi": (i + 1) / bins, "n": len(g), "mean_confidence": mean_c, "accuracy": acc}
            )
        return {"target": target, "n": len(pairs), "ece": ece if pairs else None, "bins": out_bins}


__all__ = ["NOT_RECORDED", "Analysis", "search_words"]
