"""Parity with transformers' BertTokenizerFast (Rust tokenizers): ids, token types, masks, offsets, word ids.

Every text of the shared data sets is compared in two settings, uncased (the vocabulary's own) and cased
(do_lower_case=False with the same vocabulary): about 140k texts or pairs per setting, ~80 s in all on the
2-core machine, no single test over ~15 s. Plus a Unicode stress set, hypothesis property tests on random
Unicode, and (marked slow) every assigned Unicode code point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from bertkit.tokenizer import BertTokenizer
from parity_helpers import assert_parity, assert_parity_or_same_refusal, single_texts, stress_texts, text_pairs

transformers = pytest.importorskip("transformers")

SETTINGS = {"uncased": True, "cased": False}
WORD_IDS_EVERY = 10  # word and sequence ids are compared on every 10th encoding of a data set (one call each)


# --- the two tokenizers -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizers(vocab_dir: str) -> dict[str, tuple[BertTokenizer, Any]]:
    from transformers import BertTokenizerFast

    out = {}
    for name, lower in SETTINGS.items():
        ref = BertTokenizerFast.from_pretrained(vocab_dir, do_lower_case=lower)
        ref.model_max_length = 10**6  # no length warnings; truncation is always explicit here
        out[name] = (BertTokenizer.from_pretrained(vocab_dir, lowercase=lower), ref)
    return out


# --- the data sets ------------------------------------------------------------------------------------------------------

SINGLE_SETS = ["wikitext2", "sst2", "cola", "conll2003"]
PAIR_SETS = ["mrpc", "rte", "qnli"]
SQUAD = {"truncation": "only_second", "max_length": 384, "stride": 128, "return_overflowing_tokens": True}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("name", SINGLE_SETS + PAIR_SETS + ["squad"])
def test_parity_on_data(tokenizers: dict, data_dir: Path, name: str, setting: str) -> None:
    """Every text (or pair) of each data set; SQuAD as question/context pairs cut into overflow windows."""
    tok, ref = tokenizers[setting]
    if name in SINGLE_SETS:
        texts = single_texts(data_dir, name)
        n = assert_parity(tok, ref, texts, word_ids_every=WORD_IDS_EVERY)
    else:
        texts, pairs = text_pairs(data_dir, name)
        kwargs = SQUAD if name == "squad" else {}
        n = assert_parity(tok, ref, texts, pairs, word_ids_every=WORD_IDS_EVERY, **kwargs)
    assert n >= len(texts) > 0


# --- the Unicode stress set -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_unicode_stress_singles_and_pairs(tokenizers: dict, setting: str) -> None:
    tok, ref = tokenizers[setting]
    texts = stress_texts()
    assert_parity(tok, ref, texts)
    assert_parity(tok, ref, texts, texts[1:] + texts[:1])
    for text in texts:
        assert tok.tokenize(text) == ref.tokenize(text), repr(text)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
def test_unicode_stress_windows(tokenizers: dict, setting: str, strategy: str) -> None:
    """Truncation with overflow windows and padding on long stress pairs."""
    tok, ref = tokenizers[setting]
    texts = [t for t in stress_texts() if len(ref.tokenize(t)) >= 12]
    pairs = texts[3:] + texts[:3]
    assert_parity_or_same_refusal(tok, ref, texts, pairs, truncation=strategy, max_length=24, stride=3,
                                  return_overflowing_tokens=True, padding="longest", pad_to_multiple_of=8)


# --- property tests on random Unicode -----------------------------------------------------------------------------------

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # a test extra: without it only the two property tests skip; the parity tests above still run
    st = None


def property_test(max_examples: int, strategies: Callable[[], dict[str, Any]]) -> Callable:
    """hypothesis' @given(**strategies()) for max_examples random cases, or a skip naming the missing package."""
    if st is None:
        return pytest.mark.skip(reason="hypothesis is not installed (pip install 'bertkit[test]'): the random-Unicode "
                                       "property tests need it")
    run = settings(max_examples=max_examples, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])
    return lambda test: run(given(**strategies())(test))


def _text() -> Any:
    """Random strings: random code points plus the characters that matter most (accents, CJK, punctuation, spaces,
    controls, specials), or runs of special tokens and word pieces."""
    chosen = "aeiouAEIOU éÉüÜñßİıΣσς中文한글ไทย\u0301\u0308\u200b\u00a0\u3000\t\n\r\x00\x85\ufffd.,!?'-[]"
    # No lone surrogates (category Cs): they cannot be encoded as UTF-8, so the Rust reference refuses them with a
    # TypeError before tokenizing (hypothesis >= 6.170 draws them by default; older releases never did).
    alphabet = st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(list(chosen)))
    return st.one_of(st.text(alphabet, max_size=40),
                     st.lists(st.sampled_from(["[CLS]", "[SEP]", "[MASK]", "word", "Émile", "x", " ", "##"]),
                              max_size=8).map("".join))


@property_test(300, lambda: {"text": _text(), "lower": st.booleans()})
def test_random_unicode(tokenizers: dict, text: str, lower: bool) -> None:
    tok, ref = tokenizers["uncased" if lower else "cased"]
    assert_parity(tok, ref, [text])


@property_test(100, lambda: {"a": _text(), "b": _text(),
                             "strategy": st.sampled_from(["longest_first", "only_first", "only_second"]),
                             "max_length": st.integers(3, 20), "stride": st.integers(0, 6)})
def test_random_pair_windows(tokenizers: dict, a: str, b: str, strategy: str, max_length: int, stride: int) -> None:
    """Random pairs through every truncation strategy with overflow windows: same windows or the same refusal."""
    tok, ref = tokenizers["uncased"]
    assert_parity_or_same_refusal(tok, ref, [a], [b], truncation=strategy, max_length=max_length, stride=stride,
                                  return_overflowing_tokens=True)


@pytest.mark.slow
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_every_assigned_code_point(tokenizers: dict, setting: str) -> None:
    """Each assigned code point (plus a sample of unassigned and private-use ones) inside, beside and between
    words: this is how the Unicode-version differences in basic.py were found (about 1-2 minutes per setting)."""
    import unicodedata

    tok, ref = tokenizers[setting]
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF
           and (unicodedata.category(chr(c)) not in ("Cn", "Co") or c % 97 == 0)]
    texts = [f"a{chr(c)}b {chr(c)} X{chr(c)}{chr(c)}" for c in cps]
    assert_parity(tok, ref, texts, word_ids_every=0)
