"""Corpus reading: sentence splitting, layouts, headings, JSONL, gzip, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bertkit.data.corpus import (
    CorpusStats,
    detect_layout,
    expand_inputs,
    iter_chunks,
    iter_documents,
    split_sentences,
)
from bertkit.errors import DataError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Mr. Elliot met Dr. Shepherd. They spoke.", ["Mr. Elliot met Dr. Shepherd.", "They spoke."]),
        ("Mrs. Clay lived on St. James Street. It rained.", ["Mrs. Clay lived on St. James Street.", "It rained."]),
        ("It cost 3.50 pounds. Then 4.", ["It cost 3.50 pounds.", "Then 4."]),
        ('"Where is he?" said Anne. "Gone." She sighed!', ['"Where is he?" said Anne.', '"Gone."', "She sighed!"]),
        ("J. R. Tolkien wrote it. The U.S. Army read it.", ["J. R. Tolkien wrote it.", "The U.S. Army read it."]),
        ("The lobster , H. americanus , is blue . It is big .", ["The lobster , H. americanus , is blue .", "It is big ."]),
        ("No terminator at the end", ["No terminator at the end"]),
        ("Wait... What? (Yes.) Fine.", ["Wait...", "What?", "(Yes.)", "Fine."]),
        ("He said no. Then he sat. See No. 5 and vol. 2 today.", ["He said no.", "Then he sat.", "See No. 5 and vol. 2 today."]),
        ("", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_joins_wrapped_lines() -> None:
    assert split_sentences("A man\nwho read.  He   left.") == ["A man who read.", "He left."]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_lines_layout_blank_lines_separate_documents(tmp_path: Path) -> None:
    f = _write(tmp_path / "a.txt", "First one.\nSecond one.\n\nThird here.\nFourth here.\nFifth.\n")
    assert detect_layout(f) == "lines"
    docs = list(iter_documents([f]))
    assert [d.sentences for d in docs] == [["First one.", "Second one."], ["Third here.", "Fourth here.", "Fifth."]]


def test_paragraph_layout_with_chapters(tmp_path: Path) -> None:
    text = (
        "Persuasion\n\nby\n\nJane Austen\n\nChapter 1\n\nSir Walter Elliot, of Kellynch Hall, was a\nman who read. "
        "Mr. Shepherd came.\n\nHe left.\n\nCHAPTER II\n\nAnne sat. She waited.\n"
    )
    f = _write(tmp_path / "book.txt", text)
    assert detect_layout(f) == "paragraphs"
    stats = CorpusStats()
    docs = list(iter_documents([f], stats=stats))
    assert [d.sentences for d in docs] == [
        ["Persuasion", "by", "Jane Austen"],  # the title page is a document of three paragraphs
        ["Sir Walter Elliot, of Kellynch Hall, was a man who read.", "Mr. Shepherd came.", "He left."],
        ["Anne sat.", "She waited."],
    ]
    assert stats.documents == 3 and stats.single_sentence_documents == 0
    assert docs[1].line == 7


def test_wikitext_titles_start_articles_and_sections_are_dropped(tmp_path: Path) -> None:
    text = (
        " \n = Alpha = \n \n Alpha is a letter . It is first . \n \n = = History = = \n \n It is old . \n"
        " = Beta = \n \n Beta is second . It follows alpha . \n"
    )
    f = _write(tmp_path / "wiki.txt", text)
    docs = list(iter_documents([f], layout="auto"))
    assert [d.sentences for d in docs] == [
        ["Alpha is a letter .", "It is first .", "It is old ."],
        ["Beta is second .", "It follows alpha ."],
    ]


def test_jsonl_and_gzip(tmp_path: Path) -> None:
    records = [{"text": "One doc. Two sentences."}, {"text": "Another.\n\nParagraph two. More.", "id": 3}]
    f = tmp_path / "c.jsonl.gz"
    with gzip.open(f, "wt", encoding="utf-8") as g:
        for r in records:
            g.write(json.dumps(r) + "\n")
    docs = list(iter_documents([f]))
    assert [d.sentences for d in docs] == [["One doc.", "Two sentences."], ["Another.", "Paragraph two.", "More."]]
    t = tmp_path / "l.txt.gz"
    with gzip.open(t, "wt", encoding="utf-8") as g:
        g.write("A b.\nC d.\n")
    assert [d.sentences for d in iter_documents([t], layout="lines")] == [["A b.", "C d."]]


def test_jsonl_errors_name_file_and_line(tmp_path: Path) -> None:
    f = _write(tmp_path / "bad.jsonl", '{"text": "ok. fine."}\n{"txt": "x"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: .*'text' field"):
        list(iter_documents([f]))
    g = _write(tmp_path / "bad2.jsonl", "{not json\n")
    with pytest.raises(DataError, match=r"bad2.jsonl:1: not valid JSON"):
        list(iter_documents([g]))


def test_bad_utf8_error_reports_byte_offset_or_skips(tmp_path: Path) -> None:
    f = tmp_path / "latin1.txt"
    f.write_bytes("Good line.\nAnother one.\n".encode() + "Caf\xe9 noir.\n".encode("latin-1") + b"Last.\n")
    with pytest.raises(DataError, match=r"latin1.txt:3: not valid UTF-8 at byte offset 27"):
        list(iter_documents([f], layout="lines"))
    stats = CorpusStats()
    docs = list(iter_documents([f], layout="lines", on_bad_utf8="skip", stats=stats))
    assert stats.bad_utf8_lines == 1
    assert docs[0].sentences == ["Good line.", "Another one.", "Last."]


def test_empty_files_and_single_sentence_documents_are_counted_skips(tmp_path: Path) -> None:
    empty = _write(tmp_path / "empty.txt", "")
    blank = _write(tmp_path / "blank.txt", "\n\n  \n")
    one = _write(tmp_path / "one.txt", "Only one sentence here.\n\nTwo here.\nYes two.\n")
    stats = CorpusStats()
    docs = list(iter_documents([empty, blank, one], layout="paragraphs", stats=stats))
    assert stats.empty_files == 2
    assert stats.single_sentence_documents == 0  # paragraphs without headings: one document per file
    assert [d.sentences for d in docs] == [["Only one sentence here.", "Two here.", "Yes two."]]
    stats = CorpusStats()
    docs = list(iter_documents([one], layout="lines", stats=stats))
    assert stats.single_sentence_documents == 1 and stats.documents == 1
    assert docs[0].sentences == ["Two here.", "Yes two."]


def test_long_documents_are_cut(tmp_path: Path) -> None:
    f = _write(tmp_path / "long.txt", "".join(f"Sentence {i}.\n" for i in range(10)))
    stats = CorpusStats()
    docs = list(iter_documents([f], layout="lines", max_document_sentences=4, stats=stats))
    assert [len(d.sentences) for d in docs] == [4, 4, 2]
    assert stats.documents_split == 2


def test_expand_inputs(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    a = _write(tmp_path / "sub" / "b.txt", "x")
    b = _write(tmp_path / "a.jsonl", "")
    _write(tmp_path / "notes.md", "ignored")
    assert expand_inputs([tmp_path]) == [b, a]
    with pytest.raises(DataError, match="no such file"):
        expand_inputs([tmp_path / "missing.txt"])


def test_chunks_are_bounded_and_never_hold_a_lone_document() -> None:
    from bertkit.data.corpus import Document

    docs = [Document("x", i, [f"s{i}a", f"s{i}b"]) for i in range(7)]
    chunks = list(iter_chunks(iter(docs), max_documents=3, max_chars=10**9))
    assert [len(c.documents) for c in chunks] == [3, 4]  # the lone 7th document joins the chunk before
    assert [c.index for c in chunks] == [0, 1]
    chunks = list(iter_chunks(iter(docs[:6]), max_documents=3, max_chars=10**9))
    assert [len(c.documents) for c in chunks] == [3, 3]
    chunks = list(iter_chunks(iter(docs), max_documents=100, max_chars=4))  # 6 chars per doc
    assert [len(c.documents) for c in chunks] == [2, 2, 3]  # each chunk full at once; the 7th joins the last


def test_real_corpora_give_documents(data_dir: Path) -> None:
    stats = CorpusStats()
    austen = list(iter_documents([data_dir / "jane_austen" / "persuasion.txt"], stats=stats))
    assert len(austen) == 25  # 24 chapters and the title page
    wiki = list(iter_documents([data_dir / "wikitext2" / "valid.txt"]))
    assert len(wiki) == 60
    assert wiki[0].sentences[0].startswith("Homarus gammarus , known as the European lobster")
