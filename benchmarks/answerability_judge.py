"""Can the generator tell whether the passages answer the question? (an offline experiment)

For each question of a stored evaluation run, re-run the retrieval of its first attempt and ask
the generator several yes/no questions appended to that attempt's answer prompt (same system
message and passages, so llama.cpp reuses the cached prefix and each judgement costs only its
own tail). Prints the AUROC of each wording's P(yes) for "the question is answerable" and for
"the first attempt's answer is correct".

    python benchmarks/answerability_judge.py --run runs/squad-normans --index index/squad-normans --limit 100
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import report

WORDINGS = {
    "state": "Question: {q}\nDo the passages above state the answer to this question? Reply yes or no.\nReply:",
    "strict": "Question: {q}\nCheck every detail of the question (names, dates, numbers, places, events) against "
              "the passages. Do the passages state the answer to exactly this question? Reply yes or no.\nReply:",
    "reader": "Question: {q}\nCould a careful reader answer this question from the passages alone, without "
              "guessing? Reply yes or no.\nReply:",
    "with_answer": "Question: {q}\nProposed answer: {a}\nIs this the answer to exactly this question, as the "
                   "passages above state it? Reply yes or no.\nReply:",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="run folder with results.jsonl (from sirag eval)")
    ap.add_argument("--index", required=True, help="the run's index directory")
    ap.add_argument("--limit", type=int, default=100)
    args = ap.parse_args()
    from self_improving_rag.batch import grade, read_done
    from self_improving_rag.config import load_config
    from self_improving_rag.evaluation.confidence_metrics import auroc
    from self_improving_rag.generation.factory import make_generator
    from self_improving_rag.generation.prompts import format_passages, load_template
    from self_improving_rag.retrieval.embedder import embedder_from_config
    from self_improving_rag.retrieval.searcher import Searcher
    from self_improving_rag.types import Strategy

    rows = list(read_done(Path(args.run) / "results.jsonl").values())[: args.limit]
    cfg = load_config(None, [f"paths.index_dir={args.index}"])
    searcher = Searcher(cfg, embedder_from_config(cfg), args.index)
    generator = make_generator(cfg)
    answerable, first_correct, probs = [], [], {k: [] for k in WORDINGS}
    for r in rows:
        if r.get("answerable") is None or not r.get("attempts"):
            continue
        first = r["attempts"][0]
        res = searcher.search(r["question"], Strategy(**first["strategy"]))
        t = load_template(first["strategy"]["prompt"])
        head = t.user.partition("{passages}")[0] + format_passages(res.passages) + "\n\n"
        for k, tail in WORDINGS.items():
            user = head + tail.format(q=" ".join(r["question"].split()), a=first["answer"])
            probs[k].append(generator.yes_probability([{"role": "system", "content": t.system},
                                                       {"role": "user", "content": user}]))
        answerable.append(bool(r["answerable"]))
        refused = bool(first["signals"].get("refusal"))
        first_correct.append(bool(grade({**r, "answer": first["answer"], "refused": refused}).get("correct")))
    figures = {"run": args.run, "questions": len(answerable), "answerable": sum(answerable)}
    for k, v in probs.items():
        figures[k] = {"auroc_answerable": auroc(v, answerable), "auroc_first_correct": auroc(v, first_correct)}
    report("answerability_judge", figures)


if __name__ == "__main__":
    main()
