"""WordPiece: greedy longest-match-first with ## continuations, [UNK] for unmatched or over-long words."""

from __future__ import annotations

from bertkit.tokenizer import WordPiece


def _wp(vocab: list[str]) -> WordPiece:
    return WordPiece({t: i for i, t in enumerate(vocab)})


def test_greedy_longest_match_first(tiny_vocab: list[str]) -> None:
    wp = _wp(tiny_vocab)
    assert wp.tokenize("unaffable") == ["un", "##aff", "##able"]
    assert wp.tokenize("playing") == ["play", "##ing"]
    assert wp.tokenize("running") == ["run", "##ning"]  # ##ning is longer than ##n
    assert wp.tokenize("abc") == ["a", "##b", "##c"]


def test_unmatched_word_is_one_unk(tiny_vocab: list[str]) -> None:
    wp = _wp(tiny_vocab)
    assert wp.tokenize("unaffablex") == ["[UNK]"]
    ids, spans = wp.encode("zzz")
    assert ids == (wp.unk_id,) and spans == ((0, 3),)


def test_word_over_100_characters_is_unk(tiny_vocab: list[str]) -> None:
    wp = _wp(tiny_vocab)
    assert wp.tokenize("a" + "b" * 99) == ["a"] + ["##b"] * 99  # exactly 100 characters: split
    assert wp.tokenize("a" + "b" * 100) == ["[UNK]"]  # 101 characters


def test_spans_and_cache(tiny_vocab: list[str]) -> None:
    wp = _wp(tiny_vocab)
    ids, spans = wp.encode("unaffable")
    assert spans == ((0, 2), (2, 5), (5, 9))
    assert wp.encode("unaffable") is wp.cache["unaffable"]
