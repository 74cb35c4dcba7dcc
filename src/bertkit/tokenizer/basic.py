"""BERT's basic tokenizer (everything before WordPiece) as small pure functions.

The steps, in the order BERT applies them (google-research/bert `tokenization.py`, and the `BertNormalizer` +
`BertPreTokenizer` of Hugging Face tokenizers, whose order we follow where the two differ):

1. `clean_text`: drop NUL, U+FFFD and control/format characters (Unicode C*), keep tab/newline/CR as whitespace,
   map every Unicode whitespace character to a space.
2. `tokenize_chinese_chars`: put spaces around CJK ideographs (the eight ranges BERT lists).
3. `run_strip_accents`: NFD, then drop non-spacing marks (Mn). Applied before lower-casing, as HF does.
4. lower-casing, character by character (so a final capital sigma becomes σ, as in Rust's `char::to_lowercase`).
5. `whitespace_tokenize` and `run_split_on_punc`: split on whitespace, then isolate every punctuation character.

`basic_tokenize` composes them on plain strings (the readable reference). `split_words` does the same work but
keeps, for every character of every word, the index of the original character it came from, so that WordPiece
tokens can report offsets into the un-normalised text; it has a fast path for ASCII text.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from typing import Iterable

# The CJK Unified Ideographs blocks BERT treats as words of their own (tokenization.py `_is_chinese_char`).
# HF tokenizers, the parity reference, starts the sixth range at 0x2B920 where google-research/bert has 0x2B820;
# we follow HF so that encodings are identical.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# Python 3.11's unicodedata is Unicode 14; HF tokenizers' category tables are older. These code points are
# classified differently there; we follow HF (found by encoding every code point with both tokenizers).
# Punctuation or format characters in Unicode 14 that HF's tables do not know: ordinary letters there.
_HF_ORDINARY: tuple[tuple[int, int], ...] = (
    (0x61D, 0x61D), (0x890, 0x891), (0x8E2, 0x8E2), (0x9FD, 0x9FD), (0xA76, 0xA76), (0xC77, 0xC77), (0xC84, 0xC84),
    (0x1B7D, 0x1B7E), (0x2E43, 0x2E4F), (0x2E52, 0x2E5D), (0x10EAD, 0x10EAD), (0x10F55, 0x10F59),
    (0x10F86, 0x10F89), (0x110CD, 0x110CD), (0x1144B, 0x1144F), (0x1145A, 0x1145B), (0x1145D, 0x1145D),
    (0x11660, 0x1166C), (0x116B9, 0x116B9), (0x1183B, 0x1183B), (0x11944, 0x11946), (0x119E2, 0x119E2),
    (0x11A3F, 0x11A46), (0x11A9A, 0x11A9C), (0x11A9E, 0x11AA2), (0x11C41, 0x11C45), (0x11C70, 0x11C71),
    (0x11EF7, 0x11EF8), (0x11FFF, 0x11FFF), (0x12FF1, 0x12FF2), (0x13430, 0x13438), (0x16E97, 0x16E9A),
    (0x16FE2, 0x16FE2), (0x1E95E, 0x1E95F),
)
# Characters HF's tables still call punctuation (Unicode changed their category later).
_HF_PUNCT: tuple[tuple[int, int], ...] = (
    (0x166D, 0x166D), (0x111C9, 0x111C9),
)
# Non-spacing marks (Mn) in Unicode 14 that HF's accent stripping keeps.
_HF_NOT_MN: tuple[tuple[int, int], ...] = (
    (0x7FD, 0x7FD), (0x898, 0x89F), (0x8CA, 0x8E1), (0x9FE, 0x9FE), (0xAFA, 0xAFF), (0xB55, 0xB55), (0xC04, 0xC04),
    (0xC3C, 0xC3C), (0xD00, 0xD00), (0xD3B, 0xD3C), (0xD81, 0xD81), (0xEBA, 0xEBA), (0x166D, 0x166D),
    (0x180F, 0x180F), (0x1885, 0x1886), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFB), (0xA82C, 0xA82C), (0xA8C5, 0xA8C5),
    (0xA8FF, 0xA8FF), (0xA9BD, 0xA9BD), (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50),
    (0x10F82, 0x10F85), (0x11070, 0x11070), (0x11073, 0x11074), (0x110C2, 0x110C2), (0x111C9, 0x111C9),
    (0x111CF, 0x111CF), (0x1123E, 0x1123E), (0x1133B, 0x1133B), (0x11438, 0x1143F), (0x11442, 0x11444),
    (0x11446, 0x11446), (0x1145E, 0x1145E), (0x1182F, 0x11837), (0x11839, 0x1183A), (0x1193B, 0x1193C),
    (0x1193E, 0x1193E), (0x11943, 0x11943), (0x119D4, 0x119D7), (0x119DA, 0x119DB), (0x119E0, 0x119E0),
    (0x11A01, 0x11A0A), (0x11A33, 0x11A38), (0x11A3B, 0x11A3E), (0x11A47, 0x11A47), (0x11A51, 0x11A56),
    (0x11A59, 0x11A5B), (0x11A8A, 0x11A96), (0x11A98, 0x11A99), (0x11C30, 0x11C36), (0x11C38, 0x11C3D),
    (0x11C3F, 0x11C3F), (0x11C92, 0x11CA7), (0x11CAA, 0x11CB0), (0x11CB2, 0x11CB3), (0x11CB5, 0x11CB6),
    (0x11D31, 0x11D36), (0x11D3A, 0x11D3A), (0x11D3C, 0x11D3D), (0x11D3F, 0x11D45), (0x11D47, 0x11D47),
    (0x11D90, 0x11D91), (0x11D95, 0x11D95), (0x11D97, 0x11D97), (0x11EF3, 0x11EF4), (0x16F4F, 0x16F4F),
    (0x16FE4, 0x16FE4), (0x1CF00, 0x1CF2D), (0x1CF30, 0x1CF46), (0x1E000, 0x1E006), (0x1E008, 0x1E018),
    (0x1E01B, 0x1E021), (0x1E023, 0x1E024), (0x1E026, 0x1E02A), (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE),
    (0x1E2EC, 0x1E2EF), (0x1E944, 0x1E94A),
)
# Characters HF's accent stripping removes although Unicode 14 does not call them Mn.
_HF_MN: tuple[tuple[int, int], ...] = (
    (0x1734, 0x1734),
)


def _in_ranges(cp: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


# Unicode White_Space characters that are not control characters (those are dropped, not spaced), plus \t\n\r.
WHITESPACE = frozenset(
    "\t\n\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

_WHITESPACE_RE = re.compile("[" + "".join(sorted(WHITESPACE)) + "]+")

# Character classes used by the aligned splitter.
KEEP, DROP, SPACE, PUNCT, CJK = 0, 1, 2, 3, 4


def is_whitespace(ch: str) -> bool:
    """True for characters BERT turns into a word boundary (spaces, tab, newline, CR and Unicode spaces)."""
    return ch in WHITESPACE


def is_control(ch: str) -> bool:
    """True for characters BERT deletes: control, format, private-use and surrogate characters (Cc, Cf, Co, Cs),
    except tab, newline and carriage return. Unassigned code points (Cn) are kept, as HF tokenizers does."""
    if ch in "\t\n\r":
        return False
    cat = unicodedata.category(ch)
    return cat[0] == "C" and cat != "Cn" and not _in_ranges(ord(ch), _HF_ORDINARY)


def is_punctuation(ch: str) -> bool:
    """True for ASCII symbols (33-47, 58-64, 91-96, 123-126) and every Unicode P* character."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    if unicodedata.category(ch)[0] == "P":
        return not _in_ranges(cp, _HF_ORDINARY)
    return _in_ranges(cp, _HF_PUNCT)


def is_nonspacing_mark(ch: str) -> bool:
    """True for the combining marks accent stripping removes (Unicode category Mn)."""
    cp = ord(ch)
    if unicodedata.category(ch) == "Mn":
        return not _in_ranges(cp, _HF_NOT_MN)
    return _in_ranges(cp, _HF_MN)


def is_chinese_char(cp: int) -> bool:
    """True if the code point is a CJK ideograph in one of BERT's eight ranges."""
    return _in_ranges(cp, CJK_RANGES)


def clean_text(text: str) -> str:
    """Remove NUL, U+FFFD and control characters; turn every whitespace character into a space."""
    return "".join(" " if is_whitespace(ch) else ch for ch in text if ch not in "\x00\ufffd" and not is_control(ch))


def tokenize_chinese_chars(text: str) -> str:
    """Put a space on both sides of every CJK ideograph so each becomes a word."""
    return "".join(f" {ch} " if is_chinese_char(ord(ch)) else ch for ch in text)


def run_strip_accents(text: str) -> str:
    """Decompose (NFD) and drop the non-spacing marks: 'café' -> 'cafe'."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if not is_nonspacing_mark(c))


def lowercase(text: str) -> str:
    """Lower-case character by character (no context-dependent final sigma, as in HF tokenizers)."""
    if text.isascii() or "\u03a3" not in text:
        return text.lower()
    return "".join(c.lower() for c in text)


def whitespace_tokenize(text: str) -> list[str]:
    """Split on runs of BERT whitespace, dropping empty pieces."""
    return [word for word in _WHITESPACE_RE.split(text) if word]


def run_split_on_punc(word: str, never_split: Iterable[str] = ()) -> list[str]:
    """Split a word so that every punctuation character is a piece of its own; `never_split` words stay whole."""
    if word in never_split:
        return [word]
    pieces: list[str] = []
    for punct, run in itertools.groupby(word, is_punctuation):
        pieces += list(run) if punct else ["".join(run)]
    return pieces


def basic_tokenize(text: str, lower: bool = True, strip_accents: bool | None = None, chinese_chars: bool = True,
                   never_split: Iterable[str] = ()) -> list[str]:
    """The basic tokenizer on plain strings: the reference composition of the steps above.

    `strip_accents=None` follows `lower`. Words listed in `never_split` are kept whole and untouched
    when they stand alone between whitespace.
    """
    never = set(never_split)
    strip = lower if strip_accents is None else strip_accents
    text = clean_text(text)
    if chinese_chars:
        text = tokenize_chinese_chars(text)
    out: list[str] = []
    for word in whitespace_tokenize(text):
        if word not in never:
            if strip:
                word = run_strip_accents(word)
            if lower:
                word = lowercase(word)
        # Normalisation can itself create whitespace (rare compatibility characters), so split again.
        for piece in whitespace_tokenize(word):
            out.extend(run_split_on_punc(piece, never))
    return out


# ------------------------------------------------------------------------------------------------------------------
# Aligned splitting: words plus the original index of each of their characters.
# ------------------------------------------------------------------------------------------------------------------

_ASCII_PUNCT = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())
# ASCII text without control characters: words are runs of letters/digits, every symbol is a word.
ASCII_WORD_RE = re.compile(r"[A-Za-z0-9]+|[" + re.escape(_ASCII_PUNCT) + "]")
ASCII_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CHUNK_RE = re.compile(r"[^ \t\n\r]+")

@functools.cache
def char_class(ch: str) -> int:
    """KEEP, DROP, SPACE, PUNCT or CJK for one original character (memoised)."""
    if ch in "\x00\ufffd" or is_control(ch):
        return DROP
    if ch in WHITESPACE:
        return SPACE
    if is_punctuation(ch):
        return PUNCT
    return CJK if is_chinese_char(ord(ch)) else KEEP


@functools.cache
def normalize_char(ch: str, lower: bool, strip: bool) -> str:
    """What one kept character becomes after accent stripping and lower-casing (possibly several characters)."""
    out = run_strip_accents(ch) if strip else ch
    return lowercase(out) if lower else out


# A word: its normalised text, the original index of its first character, and the original index of every
# character (None when the word is an unchanged slice of the original: index = start + position).
Word = tuple[str, int, "list[int] | None"]


def word_span(word: Word) -> tuple[int, int]:
    """Where a word of `split_words` (or `BertTokenizer.words`) lies in the original text: (start, end) characters.

    Its third field is None (an unchanged or only case-folded slice) or False (a special token), so the word's own
    length gives the end, or its characters' original positions (normalisation changed the text)."""
    text, start, positions = word
    if positions:
        return positions[0], positions[-1] + 1
    return start, start + len(text)


def split_words(text: str, lower: bool, strip: bool, chinese_chars: bool, base: int = 0) -> list[Word]:
    """Normalise and split `text` into words, each with the original positions of its characters.

    `base` is added to every position (used when `text` is a slice of a longer original).
    """
    if text.isascii() and not ASCII_CONTROL_RE.search(text):
        if lower:
            text = text.lower()
        return [(m.group(), m.start() + base, None) for m in ASCII_WORD_RE.finditer(text)]
    # Mixed text: ASCII whitespace always separates words, so plain-ASCII chunks still take the fast path.
    words: list[Word] = []
    for m in _CHUNK_RE.finditer(text):
        chunk, start = m.group(), m.start() + base
        if chunk.isascii() and not ASCII_CONTROL_RE.search(chunk):
            if lower:
                chunk = chunk.lower()
            words += [(w.group(), w.start() + start, None) for w in ASCII_WORD_RE.finditer(chunk)]
        else:
            words += _split_chars(chunk, lower, strip, chinese_chars, start)
    return words


def _split_chars(text: str, lower: bool, strip: bool, chinese_chars: bool, base: int) -> list[Word]:
    """`split_words` character by character, for text with non-ASCII or control characters."""
    words: list[Word] = []
    cur: list[str] = []
    pos: list[int] = []
    changed = False

    def flush() -> None:
        nonlocal cur, pos, changed
        if cur:
            w = "".join(cur)
            words.append((w, pos[0], pos if changed else None))
            cur, pos, changed = [], [], False

    for i, ch in enumerate(text):
        cls = char_class(ch)
        if cls == DROP:
            continue
        if cls == SPACE:
            flush()
            continue
        if cls == CJK and not chinese_chars:
            cls = KEEP
        norm = normalize_char(ch, lower, strip) if (lower or strip) else ch
        if cls == CJK:
            flush()
            if norm:
                words.append((norm, i + base, [i + base] * len(norm) if len(norm) > 1 else None))
            continue
        # Normalised characters are classified again: a decomposition can yield a space or a symbol.
        for nc in norm:
            ncls = cls if nc == ch else char_class(nc)
            if ncls == SPACE:
                flush()
            elif ncls == PUNCT:
                flush()
                words.append((nc, i + base, None))
            else:
                if pos and pos[-1] + 1 != i + base:  # a dropped character or a multi-character expansion
                    changed = True
                cur.append(nc)
                pos.append(i + base)
    flush()
    return words
