"""Chunkers (fixed, section, semantic): offsets, token bounds, sections, breadcrumbs, stable ids.

Invariants are checked on the test corpus loaded from files, on hand-made documents and on
random markdown-like documents (hypothesis). Tokens are counted with the tokenizer the
chunker was given (the hash embedder's regex tokenizer), as the chunkers count them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from self_improving_rag.ingestion.chunkers import (
    CHUNKERS,
    FixedChunker,
    SectionChunker,
    SemanticChunker,
    make_chunker,
)
from self_improving_rag.ingestion.chunkers.base import pack
from self_improving_rag.ingestion.loaders import load_document
from self_improving_rag.ingestion.sections import detect_sections, section_spans
from self_improving_rag.ingestion.sentences import split_sentences
from self_improving_rag.retrieval.embedder import HashEmbedder
from self_improving_rag.types import Chunk, Document

REPO = Path(__file__).resolve().parents[2]
EMBEDDER = HashEmbedder(dim=64)
TOK = EMBEDDER.tokenizer

# The parameters the conftest's fake config uses, so these chunks match the built index.
PARAMS = {
    "fixed": {"size": 40, "overlap": 8},
    "section": {"max_tokens": 60, "min_tokens": 5},
    "semantic": {"max_tokens": 60, "min_tokens": 5},
}
MAX_TOKENS = {"fixed": 40, "section": 60, "semantic": 60}


def _chunk(name: str, doc: Document, params: dict | None = None, embed_limit: int = 256) -> list[Chunk]:
    chunker = make_chunker(name, PARAMS[name] if params is None else params, embed_limit)
    return chunker.chunk(doc, TOK, EMBEDDER.embed)


def _doc(text: str, title: str = "Doc", fmt: str = "markdown", doc_id: str = "doc") -> Document:
    return Document(doc_id=doc_id, path=f"/virtual/{doc_id}.md", text=text, title=title,
                    sections=detect_sections(text, fmt, title))


def _uncovered(doc: Document, chunks: list[Chunk]) -> list[int]:
    """Offsets of non-whitespace characters that no chunk contains."""
    covered = np.zeros(len(doc.text), dtype=bool)
    for c in chunks:
        covered[c.start:c.end] = True
    return [i for i, ch in enumerate(doc.text) if not ch.isspace() and not covered[i]]


def _leaf_spans(doc: Document) -> list[tuple[int, int, tuple[str, ...]]]:
    return section_spans(doc.sections, len(doc.text)) if doc.sections else [(0, len(doc.text), ())]


def _check_common(doc: Document, chunks: list[Chunk], name: str, max_tokens: int) -> None:
    """Invariants every chunker keeps."""
    for position, c in enumerate(chunks):
        assert 0 <= c.start < c.end <= len(doc.text)
        assert c.text == doc.text[c.start:c.end]
        assert c.doc_id == doc.doc_id and c.strategy == name and c.position == position
        assert TOK.count(c.text) <= max_tokens, (c.n_tokens, c.text)
        assert c.n_tokens == TOK.count(c.text)
        assert c.chunk_id == Chunk.make_id(doc.doc_id, name, c.start, c.end, c.text)
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)
    assert not _uncovered(doc, chunks), [doc.text[i] for i in _uncovered(doc, chunks)][:20]


def _check_within_sections(doc: Document, chunks: list[Chunk], min_tokens: int) -> None:
    """A chunk crosses a leaf boundary only where a tiny section (< min_tokens) was merged
    into its next sibling or, for a parent's lone title, into its first child."""
    spans = _leaf_spans(doc)
    for c in chunks:
        for (a, b, left), (_, _, right) in zip(spans, spans[1:]):
            if c.start < b < c.end:
                assert TOK.count(doc.text[a:b]) < min_tokens, (c.text, b)
                assert left[:-1] == right[:-1] or right[:len(left)] == left, (c.text, left, right)
        if min_tokens == 0:
            assert any(a <= c.start and c.end <= b for a, b, _ in spans), c.text


def _check_breadcrumb(chunks: list[Chunk]) -> None:
    """The embedded text is the breadcrumb, a line break and the text; the breadcrumb in full, or
    shortened (with "…") when it would take too much of the embedder's window."""
    for c in chunks:
        crumb, _, text = c.embed_text.partition("\n")
        assert text == c.text and (crumb == c.section or "…" in crumb), (crumb, c.section)


# ---------------------------------------------------------------- the test corpus, from files


@pytest.fixture
def corpus_docs(corpus_dir: Path) -> dict[str, Document]:
    return {p.name: load_document(p) for p in sorted(corpus_dir.iterdir())}


@pytest.mark.parametrize("name", sorted(CHUNKERS))
def test_corpus_invariants(corpus_docs: dict[str, Document], name: str) -> None:
    for doc in corpus_docs.values():
        chunks = _chunk(name, doc)
        assert chunks
        _check_common(doc, chunks, name, MAX_TOKENS[name])
        if name != "fixed":
            _check_within_sections(doc, chunks, PARAMS[name]["min_tokens"])


@pytest.mark.parametrize("name", ["section", "semantic"])
def test_breadcrumb_goes_to_embed_text_only(corpus_docs: dict[str, Document], name: str) -> None:
    doc = corpus_docs["harbour.md"]
    chunks = _chunk(name, doc)
    _check_breadcrumb(chunks)
    lighthouse = next(c for c in chunks if "Clara Venn" in c.text)
    assert lighthouse.section == "The Harbour Town > Chapter 1: The Lighthouse"
    assert lighthouse.embed_text.startswith("The Harbour Town > Chapter 1: The Lighthouse\n")
    # The raw text is the document's own text: the breadcrumb is not glued onto it.
    assert lighthouse.text == doc.text[lighthouse.start:lighthouse.end]
    assert not lighthouse.text.startswith("The Harbour Town >")
    market = [c for c in chunks if "Dr. Pim" in c.text]
    assert market and all(c.section.endswith("Chapter 3: The Market") for c in market)


def test_fixed_chunker_embeds_raw_text(corpus_docs: dict[str, Document]) -> None:
    doc = corpus_docs["harbour.md"]
    chunks = _chunk("fixed", doc)
    assert all(c.embed_text == c.text for c in chunks)
    # The breadcrumb still records where the chunk starts, for display.
    assert any(c.section == "The Harbour Town > Chapter 2: The Storm" for c in chunks)


@pytest.mark.parametrize("name", sorted(CHUNKERS))
def test_ids_are_stable_within_a_run(corpus_docs: dict[str, Document], corpus_dir: Path, name: str) -> None:
    first = _chunk(name, corpus_docs["harbour.md"])
    again = _chunk(name, load_document(corpus_dir / "harbour.md"))
    assert first == again
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]


_IDS_SCRIPT = """
import json, sys
from pathlib import Path
from self_improving_rag.ingestion.chunkers import make_chunker
from self_improving_rag.ingestion.loaders import load_document
from self_improving_rag.retrieval.embedder import HashEmbedder
params = json.loads(sys.argv[2])
emb = HashEmbedder(dim=64)
doc = load_document(Path(sys.argv[1]))
print(json.dumps({n: [c.chunk_id for c in make_chunker(n, p, 256).chunk(doc, emb.tokenizer, emb.embed)]
                  for n, p in params.items()}))
"""


def test_ids_are_stable_across_processes(corpus_dir: Path) -> None:
    """Ids come from sha256, not from Python's per-process salted hash()."""
    path = corpus_dir / "harbour.md"
    expected = {n: [c.chunk_id for c in _chunk(n, load_document(path))] for n in PARAMS}
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", _IDS_SCRIPT, str(path), json.dumps(PARAMS)],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=True)
    assert json.loads(out.stdout) == expected


def test_editing_one_section_keeps_the_ids_of_earlier_sections(corpus_docs: dict[str, Document],
                                                               corpus_dir: Path) -> None:
    path = corpus_dir / "harbour.md"
    before = _chunk("section", load_document(path))
    path.write_text(path.read_text(encoding="utf-8") + "The bell rings at noon.\n", encoding="utf-8")
    after = _chunk("section", load_document(path))
    assert [c.chunk_id for c in before[:-1]] == [c.chunk_id for c in after[:-1]]
    assert before[-1].chunk_id != after[-1].chunk_id
    assert after[-1].text.endswith("The bell rings at noon.")


# ---------------------------------------------------------------- fixed chunker


SENTENCES = [f"Sentence number {w} is here." for w in
             "one two three four five six seven eight nine ten eleven twelve".split()]


def test_fixed_windows_overlap_and_snap_to_sentences() -> None:
    # Each sentence is 6 tokens: windows of 20 hold 3 sentences and restart 2 sentences back.
    text = " ".join(SENTENCES)
    doc = Document(doc_id="s", path="/virtual/s.txt", text=text, title="S")
    assert {TOK.count(s) for s in SENTENCES} == {6}
    chunks = FixedChunker(size=20, overlap=12).chunk(doc, TOK)
    _check_common(doc, chunks, "fixed", 20)
    starts = {s for s, _ in split_sentences(text)}
    ends = {e for _, e in split_sentences(text)}
    assert all(c.start in starts and c.end in ends for c in chunks)
    assert chunks[0].text == " ".join(SENTENCES[:3])
    for prev, nxt in zip(chunks, chunks[1:]):
        assert prev.start < nxt.start < prev.end  # overlapping, and always moving on
        assert 0 < TOK.count(text[nxt.start:prev.end]) <= 12
    assert chunks[-1].end == len(text)


def test_fixed_without_overlap_tiles_the_text() -> None:
    text = " ".join(SENTENCES)
    doc = Document(doc_id="s", path="/virtual/s.txt", text=text, title="S")
    chunks = FixedChunker(size=20, overlap=0).chunk(doc, TOK)
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.start >= prev.end and not text[prev.end:nxt.start].strip()
    assert [c.n_tokens for c in chunks] == [18, 18, 18, 18]


def test_fixed_ignores_sections() -> None:
    """The fixed chunker may cross section borders (that is its point as a baseline)."""
    body = " ".join(SENTENCES[:2])
    text = f"# A\n\n{body}\n\n# B\n\n{body}"
    doc = _doc(text)
    chunks = FixedChunker(size=60, overlap=0).chunk(doc, TOK)
    assert len(chunks) == 1 and chunks[0].text == text


def test_fixed_splits_a_sentence_longer_than_the_window() -> None:
    text = " ".join(["word"] * 50) + "."
    doc = Document(doc_id="w", path="/virtual/w.txt", text=text, title="W")
    chunks = FixedChunker(size=16, overlap=0).chunk(doc, TOK)
    _check_common(doc, chunks, "fixed", 16)
    assert len(chunks) == 4


def test_abbreviations_do_not_end_sentences() -> None:
    text = ("Mr. Alder met Dr. Pim near St. Clement church. They spoke of Mrs. Lune. "
            "St. Ives is far away. Dr. Pim went home.")
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "Mr. Alder met Dr. Pim near St. Clement church.",
        "They spoke of Mrs. Lune.",
        "St. Ives is far away.",
        "Dr. Pim went home.",
    ]
    doc = Document(doc_id="a", path="/virtual/a.txt", text=text, title="A")
    for chunk in FixedChunker(size=16, overlap=4).chunk(doc, TOK):
        assert not chunk.text.endswith(("Mr.", "Mrs.", "Dr.", "St."))
        assert chunk.text.endswith(".")


def test_split_sentences_offsets_are_absolute() -> None:
    text = "Ignore this. Mr. Venn built it. Then he left."
    start = text.index("Mr.")
    assert [text[s:e] for s, e in split_sentences(text, start)] == ["Mr. Venn built it.", "Then he left."]
    with pytest.raises(ValueError):
        split_sentences(text, 5, 2)


# ---------------------------------------------------------------- section chunker


NESTED = (
    "Preface line before any heading, long enough to stand alone as its own chunk here.\n\n"
    "# Part One\n\n"
    "## Chapter 1\n\n"
    + " ".join(SENTENCES[:4]) + "\n\n" + " ".join(SENTENCES[4:8]) + "\n\n"
    "## Chapter 2\n\n"
    + " ".join(SENTENCES[8:]) + "\n\n"
    "# Part Two\n\n"
    "Part two has a body of its own, so it is not a lone title at all.\n"
)


def test_section_chunks_never_cross_a_section_without_merging() -> None:
    doc = _doc(NESTED)
    chunks = SectionChunker(max_tokens=30, min_tokens=0).chunk(doc, TOK)
    _check_common(doc, chunks, "section", 30)
    _check_within_sections(doc, chunks, 0)
    _check_breadcrumb(chunks)
    assert {c.section for c in chunks} >= {"Doc > Part One > Chapter 1", "Doc > Part One > Chapter 2",
                                           "Doc > Part Two"}


def test_section_splits_long_sections_at_paragraphs() -> None:
    doc = _doc(NESTED)
    chunks = SectionChunker(max_tokens=30, min_tokens=0).chunk(doc, TOK)
    chapter1 = [c for c in chunks if c.section == "Doc > Part One > Chapter 1"]
    # The heading line and the first paragraph fit (3 + 24 tokens); the second paragraph follows.
    assert [c.text for c in chapter1] == ["## Chapter 1\n\n" + " ".join(SENTENCES[:4]),
                                          " ".join(SENTENCES[4:8])]


def test_section_merges_a_tiny_section_into_its_next_sibling() -> None:
    text = "# A\n\n## Short\n\nTiny.\n\n## Long\n\n" + " ".join(SENTENCES[:3]) + "\n"
    doc = _doc(text)
    chunks = SectionChunker(max_tokens=60, min_tokens=10).chunk(doc, TOK)
    _check_within_sections(doc, chunks, 10)
    merged = next(c for c in chunks if "Tiny." in c.text)
    assert "Sentence number one" in merged.text
    # The chunk holds text of both sections, so its label names both, under their parent.
    assert merged.section == "Doc > A > Short – Long"
    assert merged.embed_text.startswith("Doc > A > Short – Long\n")


@pytest.mark.parametrize("name", ["section", "semantic"])
def test_chunks_after_a_merged_tiny_section_name_only_their_own_section(name: str) -> None:
    text = "# A\n\n## Short\n\nTiny.\n\n## Long\n\n" + "\n\n".join(SENTENCES[:8]) + "\n"
    doc = _doc(text)
    chunks = _chunk(name, doc, {"max_tokens": 30, "min_tokens": 10})
    assert len(chunks) > 1
    first, rest = chunks[0], chunks[1:]
    assert "Tiny." in first.text and first.section == "Doc > A > Short – Long"
    assert all("Tiny." not in c.text and c.section == "Doc > A > Long" for c in rest), [c.section for c in rest]


def test_a_lone_parent_title_merged_into_its_child_keeps_the_child_path() -> None:
    chunks = SectionChunker(max_tokens=60, min_tokens=5).chunk(_doc(NESTED), TOK)
    lead = next(c for c in chunks if c.text.startswith("# Part One"))
    assert lead.section == "Doc > Part One > Chapter 1"


@pytest.mark.parametrize("name", ["section", "semantic"])
def test_a_lone_parent_title_is_not_a_chunk(name: str) -> None:
    doc = _doc(NESTED)
    chunks = _chunk(name, doc, {"max_tokens": 60, "min_tokens": 5})
    assert all(c.text.strip() != "# Part One" for c in chunks), [c.text for c in chunks]


# ---------------------------------------------------------------- semantic chunker


LIGHT = [
    "The lighthouse keeper lit the lamp every night.",
    "Every night the keeper trimmed the lighthouse lamp.",
    "The lamp of the lighthouse burned oil every night.",
    "The keeper of the lighthouse watched the lamp all night.",
]
APPLE = [
    "Apple trees grew in the orchard by the mill.",
    "The mill orchard had sixty apple trees.",
    "Apple trees in the mill orchard gave cider.",
    "The orchard apple trees stood behind the mill.",
]


def test_semantic_breaks_where_the_topic_changes() -> None:
    text = " ".join(LIGHT + APPLE)
    doc = Document(doc_id="t", path="/virtual/t.txt", text=text, title="Topics")
    chunks = SemanticChunker(percentile=90, window=1, min_tokens=10, max_tokens=200).chunk(doc, TOK, EMBEDDER.embed)
    _check_common(doc, chunks, "semantic", 200)
    assert [c.text for c in chunks] == [" ".join(LIGHT), " ".join(APPLE)]
    _check_breadcrumb(chunks)
    assert chunks[0].section == "Topics"


def test_semantic_respects_max_tokens_without_a_topic_change() -> None:
    text = " ".join(LIGHT * 3)
    doc = Document(doc_id="t", path="/virtual/t.txt", text=text, title="T")
    chunks = SemanticChunker(min_tokens=0, max_tokens=30).chunk(doc, TOK, EMBEDDER.embed)
    _check_common(doc, chunks, "semantic", 30)
    assert len(chunks) >= 4


def test_semantic_needs_an_embed_function() -> None:
    doc = Document(doc_id="t", path="/virtual/t.txt", text=" ".join(LIGHT), title="T")
    with pytest.raises(ValueError, match="embed"):
        SemanticChunker().chunk(doc, TOK, None)


def test_semantic_small_max_tokens_is_rejected_or_respected() -> None:
    try:
        chunker = SemanticChunker(min_tokens=0, max_tokens=8)
    except ValueError:
        return
    doc = Document(doc_id="t", path="/virtual/t.txt", text=" ".join(LIGHT), title="T")
    chunks = chunker.chunk(doc, TOK, EMBEDDER.embed)
    assert all(c.n_tokens <= 8 for c in chunks), [c.n_tokens for c in chunks]


def test_empty_or_blank_document_gives_no_chunks() -> None:
    doc = Document(doc_id="e", path="/virtual/e.txt", text="  \n\n ", title="E")
    for name in CHUNKERS:
        assert _chunk(name, doc) == []


# ---------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: FixedChunker(size=15), "size"),
        (lambda: FixedChunker(size=40, overlap=-1), "overlap"),
        (lambda: FixedChunker(size=40, overlap=40), "overlap"),
        (lambda: SectionChunker(max_tokens=15), "max_tokens"),
        (lambda: SectionChunker(max_tokens=40, min_tokens=41), "min_tokens"),
        (lambda: SectionChunker(max_tokens=40, min_tokens=-1), "min_tokens"),
        (lambda: SemanticChunker(percentile=0), "percentile"),
        (lambda: SemanticChunker(percentile=100), "percentile"),
        (lambda: SemanticChunker(window=0), "window"),
        (lambda: SemanticChunker(min_tokens=50, max_tokens=40), "min_tokens"),
        (lambda: make_chunker("sliding", {}, 256), "sliding"),
        (lambda: pack([], 0), "max_tokens"),
    ],
)
def test_bad_parameters_raise_value_error(factory, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        factory()


def test_make_chunker_records_its_params() -> None:
    chunker = make_chunker("section", {"max_tokens": 60, "min_tokens": 5}, 128)
    assert isinstance(chunker, SectionChunker)
    assert chunker.params() == {"max_tokens": 60, "min_tokens": 5, "embed_limit": 128}
    assert make_chunker("fixed", {"size": 40, "overlap": 8}, 256).params()["size"] == 40


# ---------------------------------------------------------------- random documents


_WORDS = ("the lighthouse keeper lamp storm harbour Mr. Dr. St. apple orchard cider 1852 of and "
          "well-known _italic_ “quoted” (aside) e.g. 3.5 -- x_y U.S. a I").split()


@st.composite
def documents(draw) -> Document:
    blocks = []
    for _ in range(draw(st.integers(1, 7))):
        if draw(st.booleans()):
            level = draw(st.integers(1, 3))
            title = " ".join(w.capitalize() for w in draw(st.lists(st.sampled_from(_WORDS[:12]), min_size=1, max_size=3)))
            blocks.append("#" * level + " " + title)
        sentences = []
        for _ in range(draw(st.integers(1, 5))):
            words = draw(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=24))
            end = draw(st.sampled_from([".", ".", "?", "!", ""]))
            sentence = " ".join(words) + end
            sentences.append(sentence[:1].upper() + sentence[1:])
        blocks.append(draw(st.sampled_from([" ", "\n"])).join(sentences))
    return _doc("\n\n".join(blocks), title="Random")


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(doc=documents(), size=st.integers(16, 48), data=st.data())
def test_fixed_properties(doc: Document, size: int, data) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    chunks = FixedChunker(size=size, overlap=overlap).chunk(doc, TOK)
    _check_common(doc, chunks, "fixed", size)
    sentences = split_sentences(doc.text)
    ends = {e for _, e in sentences}
    for c in chunks:
        # A window ends at a sentence end unless it had to cut a sentence longer than itself.
        holder = next(((s, e) for s, e in sentences if s < c.end <= e), None)
        assert c.end in ends or (holder and TOK.count(doc.text[holder[0]:holder[1]]) > size)
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.start > prev.start
        if nxt.start < prev.end:
            assert TOK.count(doc.text[nxt.start:prev.end]) <= overlap


@_SETTINGS
@given(doc=documents(), max_tokens=st.integers(16, 64), data=st.data(), embed_limit=st.integers(32, 256))
def test_section_properties(doc: Document, max_tokens: int, data, embed_limit: int) -> None:
    min_tokens = data.draw(st.integers(0, max_tokens))
    chunks = SectionChunker(max_tokens=max_tokens, min_tokens=min_tokens, embed_limit=embed_limit).chunk(doc, TOK)
    _check_common(doc, chunks, "section", max_tokens)
    _check_within_sections(doc, chunks, min_tokens)
    _check_breadcrumb(chunks)
    assert chunks == SectionChunker(max_tokens=max_tokens, min_tokens=min_tokens,
                                    embed_limit=embed_limit).chunk(doc, TOK)


@_SETTINGS
@given(doc=documents(), max_tokens=st.integers(16, 64), data=st.data(),
       percentile=st.floats(1, 99), window=st.integers(1, 3))
def test_semantic_properties(doc: Document, max_tokens: int, data, percentile: float, window: int) -> None:
    min_tokens = data.draw(st.integers(0, max_tokens))
    chunker = SemanticChunker(percentile=percentile, window=window, min_tokens=min_tokens, max_tokens=max_tokens)
    chunks = chunker.chunk(doc, TOK, EMBEDDER.embed)
    _check_common(doc, chunks, "semantic", max_tokens)
    _check_within_sections(doc, chunks, min_tokens)
    _check_breadcrumb(chunks)
    assert [c.chunk_id for c in chunks] == [c.chunk_id for c in chunker.chunk(doc, TOK, EMBEDDER.embed)]


class _PieceTokenizer:
    """Word pieces of at most three characters, like a WordPiece vocabulary meeting rare words."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        out = []
        for m in re.finditer(r"\w+|[^\w\s]", text):
            out += [(k, min(k + 3, m.end())) for k in range(m.start(), m.end(), 3)]
        return out

    def count(self, text: str) -> int:
        return len(self.spans(text))


def test_split_long_cuts_between_words_not_inside_them() -> None:
    from self_improving_rag.ingestion.chunkers.base import Unit, split_long

    tok = _PieceTokenizer()
    text = " ".join(["pneumonoultramicroscopic", "floccinaucinihilipilification", "antidisestablishment"] * 12)
    pieces = split_long(text, Unit(0, len(text), tok.count(text)), 40, tok)
    assert len(pieces) > 1
    words = set(text.split())
    for p in pieces:
        chunk = text[p.start:p.end]
        assert set(chunk.split()) <= words, chunk  # whole words only
        assert p.n_tokens == tok.count(chunk) <= 40
    assert " ".join(text[p.start:p.end] for p in pieces) == text
    # A single word longer than the limit is still cut (there is no better place).
    word = "x" * 300
    long_word = split_long(word, Unit(0, 300, tok.count(word)), 40, tok)
    assert all(p.n_tokens <= 40 for p in long_word) and "".join(word[p.start:p.end] for p in long_word) == word


def test_split_long_balances_its_pieces_instead_of_leaving_a_one_token_tail() -> None:
    """A sentence one token over the limit (its full stop) used to become a full piece and a lone
    ".", which retrieval returned as a passage."""
    from self_improving_rag.ingestion.chunkers.base import Unit, split_long

    tok = _PieceTokenizer()
    text = " ".join(f"w{i}" for i in range(60)) + "."  # 61 tokens: 60 words and the stop
    assert tok.count(text) == 61
    pieces = split_long(text, Unit(0, len(text), 61), 60, tok)
    assert [p.n_tokens for p in pieces] == [31, 30]
    assert " ".join(text[p.start:p.end] for p in pieces) == text
    for n, limit in ((100, 40), (81, 40), (121, 60), (59, 20)):
        t = " ".join(["ab"] * n)  # one token a word
        sizes = [p.n_tokens for p in split_long(t, Unit(0, len(t), n), limit, tok)]
        assert sum(sizes) == n and max(sizes) <= limit and max(sizes) - min(sizes) <= 1, (n, limit, sizes)
        assert len(sizes) == -(-n // limit)  # no more pieces than needed


@pytest.mark.parametrize("name", ["section", "semantic"])
def test_a_merged_span_leaves_room_for_its_longest_chunk_label(name: str) -> None:
    # A tiny section, then a small one with a long title, then a big one with a short title:
    # a chunk of the first two is labelled "S – <long title>", longer than the span's "S – C".
    long_title = " ".join(f"word{i}" for i in range(20))
    text = (f"# A\n\n## S\n\nTiny.\n\n## {long_title}\n\n" + " ".join(SENTENCES[:5]) + "\n\n## C\n\n"
            + " ".join(SENTENCES[:7]) + "\n\n" + "\n\n".join(SENTENCES) + "\n")
    doc = _doc(text)
    chunks = _chunk(name, doc, {"max_tokens": 70, "min_tokens": 70}, embed_limit=70)
    assert any(c.section.endswith(f"S – {long_title}") for c in chunks), [c.section for c in chunks]
    for c in chunks:
        assert TOK.count(c.embed_text) <= 70 - 2, (c.section, TOK.count(c.embed_text))


@pytest.mark.parametrize("name", ["section", "semantic"])
@pytest.mark.parametrize("embed_limit", [256, 64, 16])
def test_embedded_text_fits_the_window_under_deep_long_headings(name: str, embed_limit: int) -> None:
    """Six nested headings of 50 words each made a breadcrumb longer than the embedder's window
    (the text budget had a floor of 16 tokens): the body was cut off from its vector."""
    headings = "".join(f"{'#' * level} " + " ".join(f"h{level}w{i}" for i in range(50)) + f"\n\nBody {level}. "
                       + " ".join(SENTENCES[:3]) + "\n\n" for level in range(1, 7))
    doc = _doc(headings + "\n\n".join(SENTENCES) + " Innermost bodyword.\n", title="Deep Manual")
    max_tokens = 220 if embed_limit == 256 else 16
    chunks = _chunk(name, doc, {"max_tokens": max_tokens, "min_tokens": 0}, embed_limit=embed_limit)
    _check_common(doc, chunks, name, max_tokens)
    for c in chunks:
        assert TOK.count(c.embed_text) <= embed_limit - 2, (TOK.count(c.embed_text), c.embed_text[:80])
        crumb, _, text = c.embed_text.partition("\n")
        assert text == c.text and crumb.startswith("Deep")
    deepest = next(c for c in chunks if "bodyword" in c.text)
    assert len(doc.sections[-1].path) == 6
    assert deepest.section == " > ".join(("Deep Manual", *doc.sections[-1].path))  # shown in full
    if embed_limit == 256:  # room for the title and the innermost heading, the middle cut out
        crumb = deepest.embed_text.partition("\n")[0]
        assert crumb.startswith("Deep Manual > … > ") and crumb.endswith("h6w49"), crumb


def test_split_long_cuts_at_spaces_not_inside_addresses_or_links() -> None:
    from self_improving_rag.ingestion.chunkers.base import Unit, split_long

    text = " ".join(f"first.last{i}@mail.example.org, see https://example.com/a/b{i}?q=1 and" for i in range(12))
    pieces = split_long(text, Unit(0, len(text), TOK.count(text)), 40, TOK)
    assert len(pieces) > 1
    for p in pieces:
        assert p.start == 0 or text[p.start - 1].isspace(), text[p.start - 10:p.start + 10]
        assert p.end == len(text) or text[p.end].isspace(), text[p.end - 10:p.end + 10]
        assert p.n_tokens == TOK.count(text[p.start:p.end]) <= 40
    # A run with no space that fits a piece is not cut, even where the balanced cut falls inside it.
    words = " ".join(f"w{i}" for i in range(10))
    url = "https://example.org/" + "/".join(f"d{i}" for i in range(14))  # 35 tokens
    text = f"{words} {url} {words}"
    pieces = split_long(text, Unit(0, len(text), TOK.count(text)), 40, TOK)
    assert any(url in text[p.start:p.end].split() for p in pieces), [text[p.start:p.end] for p in pieces]
    assert all(p.n_tokens <= 40 for p in pieces) and " ".join(text[p.start:p.end] for p in pieces) == text
    # A run with no space longer than the limit is still cut, at punctuation between its words.
    run = "/".join(f"part{i}" for i in range(60))
    cut = split_long(run, Unit(0, len(run), TOK.count(run)), 40, TOK)
    assert len(cut) > 1 and all(p.n_tokens <= 40 for p in cut)
    assert "".join(run[p.start:p.end] for p in cut) == run
    assert all(run[p.end - 1] == "/" or run[p.end] == "/" for p in cut[:-1])
    # A space far back is no place to cut: it would leave a sliver before a long run without spaces.
    text = "See https://example.org/" + "/".join(f"d{i}" for i in range(20)) + "."
    pieces = split_long(text, Unit(0, len(text), TOK.count(text)), 40, TOK)
    assert min(p.n_tokens for p in pieces) > 5, [text[p.start:p.end] for p in pieces]
    assert all(p.n_tokens <= 40 for p in pieces)
