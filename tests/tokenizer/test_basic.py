"""Unit tests of the basic tokenizer's pure functions, on hand-computed cases."""

from __future__ import annotations

import pytest

from bertkit.tokenizer.basic import (
    basic_tokenize,
    clean_text,
    is_chinese_char,
    is_control,
    is_punctuation,
    is_whitespace,
    lowercase,
    run_split_on_punc,
    run_strip_accents,
    split_words,
    tokenize_chinese_chars,
    whitespace_tokenize,
    word_span,
)


def test_is_whitespace() -> None:
    for ch in " \t\n\r\u00a0\u2009\u3000\u2028":
        assert is_whitespace(ch), repr(ch)
    for ch in "a\x0b\x85\u200b-":
        assert not is_whitespace(ch), repr(ch)


def test_is_control() -> None:
    for ch in "\x00\x07\x1b\x7f\x85\u200b\u200d\ufeff\ue000":
        assert is_control(ch), repr(ch)
    for ch in "\t\n\r a\u0378":  # tab/newline/CR are whitespace; unassigned code points are kept
        assert not is_control(ch), repr(ch)


def test_is_punctuation() -> None:
    for ch in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—…、。「」":
        assert is_punctuation(ch), repr(ch)
    for ch in "aZ09 é中€":  # currency signs are symbols (Sc), not punctuation, outside ASCII
        assert not is_punctuation(ch), repr(ch)


def test_is_chinese_char() -> None:
    assert is_chinese_char(ord("中")) and is_chinese_char(0x3400) and is_chinese_char(0x20000)
    assert is_chinese_char(0xF900) and is_chinese_char(0x2F800)
    assert not is_chinese_char(ord("あ")) and not is_chinese_char(ord("한")) and not is_chinese_char(ord("a"))


def test_clean_text() -> None:
    assert clean_text("a\x00b\ufffdc\x07d") == "abcd"
    assert clean_text("a\tb\nc\rd\u00a0e\u3000f") == "a b c d e f"
    assert clean_text("zero\u200bwidth") == "zerowidth"
    assert clean_text("") == ""


def test_tokenize_chinese_chars() -> None:
    assert tokenize_chinese_chars("ab中文c") == "ab 中  文 c"
    assert tokenize_chinese_chars("한국어") == "한국어"


def test_run_strip_accents() -> None:
    assert run_strip_accents("café naïve Ångström") == "cafe naive Angstrom"
    assert run_strip_accents("e\u0301\u0302") == "e"
    assert run_strip_accents("ß") == "ß"


def test_lowercase_is_per_character() -> None:
    assert lowercase("HeLLo") == "hello"
    assert lowercase("ΟΔΟΣ") == "οδοσ"  # no final-sigma rule, as in HF tokenizers
    assert lowercase("İ") == "i\u0307"


def test_whitespace_tokenize() -> None:
    assert whitespace_tokenize("  a  b\tc\n") == ["a", "b", "c"]
    assert whitespace_tokenize(" \t ") == []


def test_run_split_on_punc() -> None:
    assert run_split_on_punc("don't!") == ["don", "'", "t", "!"]
    assert run_split_on_punc("a.b,c") == ["a", ".", "b", ",", "c"]
    assert run_split_on_punc("[MASK]", never_split={"[MASK]"}) == ["[MASK]"]
    assert run_split_on_punc("...") == [".", ".", "."]


def test_basic_tokenize() -> None:
    assert basic_tokenize(" \tHeLLo!how  \n Are yoU?  ") == ["hello", "!", "how", "are", "you", "?"]
    assert basic_tokenize("Héllo Wörld", lower=False) == ["Héllo", "Wörld"]
    assert basic_tokenize("Héllo", lower=False, strip_accents=True) == ["Hello"]
    assert basic_tokenize("Héllo", lower=True, strip_accents=False) == ["héllo"]
    assert basic_tokenize("ab中文c") == ["ab", "中", "文", "c"]
    assert basic_tokenize("ab中文c", chinese_chars=False) == ["ab中文c"]
    assert basic_tokenize("[MASK] x", never_split=["[MASK]"]) == ["[MASK]", "x"]


@pytest.mark.parametrize("text", ["Hello, World!", "Café  naïve\t(x)", "a\x00b c\u200bd", "中文ab", "ΟΔΟΣ İx",
                                  "e\u0301\u0301 q", "", "   ", "ﬁne Ａ"])
@pytest.mark.parametrize("lower", [True, False])
def test_split_words_matches_reference_composition(text: str, lower: bool) -> None:
    """The aligned splitter yields the same words as the plain-string composition of the steps."""
    words = split_words(text, lower, lower, True)
    assert [w for w, _, _ in words] == basic_tokenize(text, lower=lower)


@pytest.mark.parametrize("text", ["Hello, World!", "Café  naïve\t(x)", "a\x00b c\u200bd", "中文ab", "ΟΔΟΣ İx",
                                  "e\u0301\u0301 q", "ﬁne Ａ", "  Zürich's 3.5%"])
@pytest.mark.parametrize("lower", [True, False])
def test_word_span_is_the_words_place_in_the_original(text: str, lower: bool) -> None:
    """Each word's span, cut from the original text and tokenized alone, gives back that word; spans do not overlap."""
    words = split_words(text, lower, lower, True)
    spans = [word_span(w) for w in words]
    for (word, _, _), (a, b) in zip(words, spans):
        assert basic_tokenize(text[a:b], lower=lower) == [word]
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
    assert word_span(("[SEP]", 7, False)) == (7, 12)  # a special token found in the text


def test_split_words_positions() -> None:
    # ASCII fast path: positions are slices of the text.
    assert split_words("Hi, you", True, True, True) == [("hi", 0, None), (",", 2, None), ("you", 4, None)]
    # A dropped control character inside a word, an accent removed, a lower-case expansion.
    words = split_words("ab\x00cd Éx İ", True, True, True)
    assert words[0] == ("abcd", 0, [0, 1, 3, 4])
    assert words[1] == ("ex", 6, None)  # É -> e keeps one character per position
    assert words[2] == ("i", 9, None)
    assert split_words("İ", True, False, True) == [("i\u0307", 0, [0, 0])]
