"""Reading raw corpora as a stream of documents, each a list of sentences.

Input formats:

* `.txt` / `.txt.gz`, layout "lines": one sentence per line, a blank line between documents
  (google-research/bert's `create_pretraining_data.py` format).
* `.txt` / `.txt.gz`, layout "paragraphs": free text; blank lines separate paragraphs, paragraphs are split
  into sentences by `split_sentences`. A document starts at each heading: a WikiText article title
  (` = Title = `) or a book chapter (`Chapter 1`, `CHAPTER IV`); WikiText section headings (` = = S = = `)
  are dropped. A file without headings is one document (cut every `max_document_sentences` sentences).
* `.jsonl` / `.jsonl.gz`: one JSON object per line, its `text` field is one document.

Layout "auto" samples the start of each text file (see `detect_layout`).
Everything streams: a file is never held in memory whole, only the current document.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

from bertkit.data.tables import parse_json
from bertkit.errors import data_error

TEXT_SUFFIXES = (".txt", ".txt.gz")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson")

# Words that end in a period without ending a sentence ("Mr. Elliot", "St. Paul", "e.g. this").
ABBREVIATIONS = frozenset("""mr mrs ms messrs mme mlle dr st jr sr prof rev revd hon capt col gen lt sgt maj adm cmdr
    gov sen rep pres mt ft esq vs e.g i.e cf al approx figs vols pp inc ltd bros dept univ jan feb apr jun jul aug sep
    sept oct nov dec viz""".split())
# Abbreviations that are also ordinary words: they only do not end a sentence before a number ("No. 5").
NUMBER_ABBREVIATIONS = frozenset("no nos vol fig ch art p".split())

_BOUNDARY = re.compile(
    r"(?P<term>[.!?\u2026]+)"  # the terminator: . ! ? … (or a run of them)
    r"(?P<close>[\"'\u201d\u2019)\]]*)"  # closing quotes / brackets stay with the sentence
    r"(?P<space>\s+)"
    r"(?=[\"'\u201c\u2018(\[]*[A-Z0-9\u00c0-\u00de])"  # next sentence starts with a capital or a digit
)
_LAST_WORD = re.compile(r"(\S+)$")
_WIKITEXT_TITLE = re.compile(r"^= (?!=)(.*\S) =$")
_WIKITEXT_SECTION = re.compile(r"^=( =)+ .* =( =)+$")
_CHAPTER = re.compile(r"^chapter\s+([0-9]+|[ivxlcdm]+)\b[.:]?.{0,40}$", re.IGNORECASE)


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences with rules: a terminator (. ! ?) plus optional closing quotes, then a
    space and a capital letter or digit; not after abbreviations (Mr. Dr. St. e.g.) or single initials (J. Smith).

    Decimals (3.14) and lower-case continuations ("Why?" said he) never split.
    """
    text = " ".join(text.split())
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if m.group("term") == ".":
            before = _LAST_WORD.search(text, start, m.start())
            word = before.group(1).lstrip("\"'\u201c\u2018([") if before else ""
            lower = word.lower()
            if word and (lower in ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or "." in word):
                continue  # "Mr.", initials "H.", "U.S." do not end a sentence
            if lower in NUMBER_ABBREVIATIONS and text[m.end() : m.end() + 1].isdigit():
                continue  # "No. 5", "vol. 2"
        sentence = text[start : m.start("space")].strip()
        if sentence:
            sentences.append(sentence)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


@dataclass
class Document:
    """One document: where it starts (for messages) and its sentences, in order."""

    source: str
    line: int
    sentences: list[str]


@dataclass
class CorpusStats:
    """Counts of what reading found and skipped (printed in the summary and stored in the index)."""

    files: int = 0
    empty_files: int = 0  # files with no text at all: skipped
    bad_utf8_lines: int = 0  # lines dropped under on_bad_utf8="skip"
    documents: int = 0  # documents with >= 2 sentences, kept
    single_sentence_documents: int = 0  # no sentence pair possible: skipped
    documents_split: int = 0  # documents cut at max_document_sentences
    sentences: int = 0  # sentences of kept documents

    def merge(self, other: "CorpusStats") -> None:
        """Add another stats object's counts into this one."""
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)


def expand_inputs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The input files: files as given, folders searched recursively for text/JSONL files (sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and q.name.endswith(TEXT_SUFFIXES + JSONL_SUFFIXES))
            if not found:
                raise data_error(p, None, "folder holds no .txt, .txt.gz, .jsonl or .jsonl.gz file")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise data_error(p, None, "no such file or folder")
    return files


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def iter_lines(path: Path, on_bad_utf8: str, stats: CorpusStats) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without newline). Undecodable lines raise a DataError naming the
    byte offset (of the uncompressed stream for .gz), or under on_bad_utf8="skip" are dropped and counted."""
    offset = 0
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if on_bad_utf8 == "skip":
                    stats.bad_utf8_lines += 1
                    offset += len(raw)
                    continue
                raise data_error(path, lineno, f"not valid UTF-8 at byte offset {offset + e.start} (byte "
                                 f"0x{raw[e.start]:02x}); convert the file to UTF-8 or pass --on-bad-utf8 "
                                 "skip") from None
            except (OSError, EOFError) as e:  # pragma: no cover - corrupt gzip
                raise data_error(path, lineno, f"cannot read: {e}") from None
            offset += len(raw)
            if lineno == 1:
                line = line.lstrip("\ufeff")
            yield lineno, line.rstrip("\r\n")


def is_heading(line: str) -> bool:
    """Whether a stripped line starts a new document: a WikiText title or a chapter heading."""
    return bool(_WIKITEXT_TITLE.match(line)) or bool(_CHAPTER.match(line))


def detect_layout(path: Path, sample_lines: int = 2000) -> str:
    """Guess "lines" or "paragraphs" from the start of a text file.

    Headings (WikiText titles, chapters) mean paragraphs. Otherwise a one-sentence-per-line file has lines that
    each hold one sentence ending in terminal punctuation; wrapped prose ends many lines mid-sentence, and
    paragraph-per-line text (WikiText) holds several sentences per line.
    """
    nonblank = multi = unterminated = 0
    with _open_binary(path) as f:
        for i, raw in enumerate(f):
            if i >= sample_lines:
                break
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            if is_heading(line) or _WIKITEXT_SECTION.match(line):
                return "paragraphs"
            nonblank += 1
            if len(split_sentences(line)) > 1:
                multi += 1
            if not line.rstrip("\"'\u201d\u2019)]").endswith((".", "!", "?", "\u2026")):
                unterminated += 1
    if nonblank == 0:
        return "lines"
    if multi / nonblank > 0.1 or unterminated / nonblank > 0.3:
        return "paragraphs"
    return "lines"


class _DocumentBuilder:
    """Collects sentences into documents, cutting long ones and dropping ones with fewer than `min_sentences`."""

    def __init__(self, max_sentences: int, stats: CorpusStats, min_sentences: int = 2) -> None:
        self.max_sentences = max_sentences
        self.min_sentences = min_sentences
        self.stats = stats
        self.current: Document | None = None

    def start(self, source: str, line: int) -> Iterator[Document]:
        yield from self.finish()
        self.current = Document(source, line, [])

    def add(self, sentence: str, source: str, line: int) -> Iterator[Document]:
        if self.current is None:
            self.current = Document(source, line, [])
        self.current.sentences.append(sentence)
        if len(self.current.sentences) >= self.max_sentences:
            self.stats.documents_split += 1
            yield from self.finish()
            self.current = Document(source, line, [])

    def finish(self) -> Iterator[Document]:
        doc, self.current = self.current, None
        if doc is None or not doc.sentences:
            return
        if len(doc.sentences) < self.min_sentences:
            self.stats.single_sentence_documents += 1
            return
        self.stats.documents += 1
        self.stats.sentences += len(doc.sentences)
        yield doc


def _paragraph_documents(lines: Iterable[tuple[int, str]], source: str,
                         builder: _DocumentBuilder) -> Iterator[Document]:
    """Documents of free text: blank lines end paragraphs, headings start documents."""
    paragraph: list[str] = []
    para_line = 0

    def flush() -> Iterator[Document]:
        nonlocal paragraph
        if paragraph:
            for s in split_sentences(" ".join(paragraph)):
                yield from builder.add(s, source, para_line)
            paragraph = []

    for lineno, line in lines:
        text = line.strip()
        if not text:
            yield from flush()
        elif is_heading(text):
            yield from flush()
            yield from builder.start(source, lineno)
        elif _WIKITEXT_SECTION.match(text):
            yield from flush()
        else:
            if not paragraph:
                para_line = lineno
            paragraph.append(text)
    yield from flush()
    yield from builder.finish()


def _line_documents(lines: Iterable[tuple[int, str]], source: str, builder: _DocumentBuilder) -> Iterator[Document]:
    """Documents in the reference's layout: a sentence per line, blank line between documents."""
    for lineno, line in lines:
        text = line.strip()
        if not text:
            yield from builder.finish()
        else:
            yield from builder.add(text, source, lineno)
    yield from builder.finish()


def _jsonl_documents(path: Path, layout: str, text_field: str, on_bad_utf8: str, builder: _DocumentBuilder,
                     stats: CorpusStats) -> Iterator[Document]:
    """One document per JSONL record; its text is split by lines or into sentences per `layout`."""
    source = str(path)
    for lineno, line in iter_lines(path, on_bad_utf8, stats):
        if not line.strip():
            continue
        record = parse_json(line, path, lineno)  # the one JSON reading: duplicate keys, lone surrogates
        if not isinstance(record, dict) or text_field not in record:
            raise data_error(path, lineno, f"expected a JSON object with a {text_field!r} field")
        text = record[text_field]
        if not isinstance(text, str):
            raise data_error(path, lineno, f"field {text_field!r} should be a string, found {type(text).__name__}")
        yield from builder.start(source, lineno)
        if layout == "lines":
            for t in text.split("\n"):
                if t.strip():
                    yield from builder.add(t.strip(), source, lineno)
        else:  # paragraphs inside one record never start a new document: headings are ordinary sentences here
            for paragraph in re.split(r"\n\s*\n", text):
                for s in split_sentences(paragraph):
                    yield from builder.add(s, source, lineno)
        yield from builder.finish()


def iter_documents(files: Iterable[Path], layout: str = "auto", on_bad_utf8: str = "error", text_field: str = "text",
                   max_document_sentences: int = 20_000, stats: CorpusStats | None = None,
                   min_sentences: int = 2) -> Iterator[Document]:
    """Stream the documents (with >= `min_sentences` sentences) of all files in order; counts go into `stats`."""
    stats = stats if stats is not None else CorpusStats()
    for path in files:
        path = Path(path)
        stats.files += 1
        before = (stats.documents, stats.single_sentence_documents)
        builder = _DocumentBuilder(max_document_sentences, stats, min_sentences)
        if path.name.endswith(JSONL_SUFFIXES):
            yield from _jsonl_documents(path, layout, text_field, on_bad_utf8, builder, stats)
        else:
            file_layout = detect_layout(path) if layout == "auto" else layout
            make = _line_documents if file_layout == "lines" else _paragraph_documents
            yield from make(iter_lines(path, on_bad_utf8, stats), str(path), builder)
        if before == (stats.documents, stats.single_sentence_documents):  # no document kept or skipped
            stats.empty_files += 1


@dataclass
class Chunk:
    """A bounded group of consecutive documents: the unit of work of one shard."""

    index: int
    documents: list[list[str]] = field(default_factory=list)
    chars: int = 0


def iter_chunks(documents: Iterable[Document], max_documents: int, max_chars: int) -> Iterator[Chunk]:
    """Group documents into chunks of at most `max_documents` documents / about `max_chars` characters.

    The grouping depends only on the documents, so it is the same whatever the number of workers. A last
    chunk with a single document is merged into the one before (a random B needs another document).
    """
    pending: Chunk | None = None
    current = Chunk(0)
    for doc in documents:
        current.documents.append(doc.sentences)
        current.chars += sum(len(s) for s in doc.sentences)
        if len(current.documents) >= max_documents or current.chars >= max_chars:
            if len(current.documents) < 2:
                continue  # one huge document: keep adding until the chunk has a second document
            if pending is not None:
                yield pending
            pending, current = current, Chunk(current.index + 1)
    if pending is not None and len(current.documents) < 2:
        pending.documents += current.documents
        pending.chars += current.chars
        current.documents = []
    if pending is not None:
        yield pending
    if current.documents:
        yield current
