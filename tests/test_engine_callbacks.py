"""Engine.ask's callbacks: what on_retrieval is given and when, and a callback that raises."""

from __future__ import annotations

import pytest

REFUSE = "I cannot answer this from the documents."
GOOD = "Tobias Lune saved eleven sailors from the wreck of the Greyling [1]."


def test_on_retrieval_reports_each_attempts_passages_before_the_model_is_asked(make_engine):
    engine, gen, _ = make_engine([REFUSE, GOOD])
    seen = []
    engine.ask("Who saved the sailors of the Greyling in the storm?",
               on_retrieval=lambda n, strategy, repair, r: seen.append((n, strategy.key, repair, len(r.passages),
                                                                        len(gen.history))))
    assert seen[0][:4] == (1, engine.config.strategy.to_strategy().key, None, seen[0][3]) and seen[0][3] > 0
    assert seen[0][4] == 0  # before the model was asked
    assert seen[-1][0] == 2 and seen[-1][2] is not None and seen[-1][4] == 1


def test_a_callback_that_raises_stops_the_question_and_records_nothing(make_engine):
    engine, gen, store = make_engine([REFUSE, GOOD])

    class Stop(Exception):
        pass

    def stop(*_):
        raise Stop

    for hook in ("on_retrieval", "on_token", "on_attempt"):
        with pytest.raises(Stop):
            engine.ask("Who saved the sailors of the Greyling in the storm?", **{hook: stop})
    assert store.stats()["outcomes"] == 0
    assert len(gen.history) == 2  # on_retrieval stopped before the model; the others after one reply each
