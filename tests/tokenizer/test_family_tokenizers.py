"""The BERT family's tokenizers (RoBERTa, XLM-R, ALBERT, DistilBERT, ELECTRA) against transformers' fast tokenizers.

Each family's folder is built here (tests/family_folders.py: a tokenizer trained on the shared texts, saved by
transformers' own class), once with tokenizer.json and once with only the family's own files (vocab.json +
merges.txt, a SentencePiece model, vocab.txt). bertkit's `load_tokenizer` on either must give, text for text, the
ids, token types, attention and special-token masks, offsets, word and sequence ids that transformers' AutoTokenizer
gives on the tokenizer.json folder: a few hundred real and odd-Unicode texts here, 2,000+ per family in the slow test.
"""

from __future__ import annotations

import functools
import json
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from bertkit.errors import CheckpointError, TokenizerError
from bertkit.tokenizer import FAMILIES, BertTokenizer, FastTokenizer, load_tokenizer
from family_folders import FAMILY_NAMES, conll_words
from parity_helpers import assert_parity, assert_parity_or_same_refusal, odd_unicode, stress_texts, tsv_rows

transformers = pytest.importorskip("transformers")

LAYOUTS = {"tokenizer.json": False, "own files": True}
QA_WINDOWS = {"truncation": "only_second", "max_length": 96, "stride": 32, "return_overflowing_tokens": True}


@pytest.fixture(scope="module")
def refs(family_dirs: dict) -> dict[str, Any]:
    """transformers' AutoTokenizer on each family's tokenizer.json folder (no length limit: truncation is explicit)."""
    out = {}
    for family in FAMILY_NAMES:
        ref = transformers.AutoTokenizer.from_pretrained(family_dirs[family, False])
        ref.model_max_length = 10**6
        out[family] = ref
    return out


@pytest.fixture(scope="module")
def ours(family_dirs: dict) -> dict[tuple[str, bool], Any]:
    return {key: load_tokenizer(folder) for key, folder in family_dirs.items()}


@functools.cache
def squad(data_dir: Path) -> tuple[list[str], list[str]]:
    """SQuAD v1.1 dev: (questions, their contexts), one per question."""
    d = json.loads((data_dir / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
    rows = [(qa["question"], p["context"]) for art in d["data"] for p in art["paragraphs"] for qa in p["qas"]]
    return [q for q, _ in rows], [c for _, c in rows]


def sample_texts(data_dir: Path, n: int) -> list[str]:
    """n texts of each source: SST-2 dev, CoNLL-2003 valid, SQuAD contexts, odd Unicode put into SST-2 test; plus
    the Unicode stress set and texts that write each family's special tokens."""
    sst2 = [r[0] for r in tsv_rows(data_dir / "sst2" / "dev.tsv", True)]
    conll = [" ".join(words) for words in conll_words(data_dir, "valid")]
    contexts = list(dict.fromkeys(squad(data_dir)[1]))
    odd = odd_unicode([r[1] for r in tsv_rows(data_dir / "sst2" / "test.tsv", True)][:n])
    specials = ["Paris is the <mask> of France.", "Paris is the [MASK] of France.", "a<mask>b [CLS]x[SEP] <s></s>",
                "<pad> [PAD] <unk> [UNK]  <mask>", "two  <mask>  <mask> masks"]
    return sst2[:n] + conll[:n] + contexts[:n] + odd + stress_texts() + specials


# --- loading ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_load_tokenizer_reads_each_family_with_tokenizers(ours: dict, family: str, layout: str) -> None:
    tok = ours[family, LAYOUTS[layout]]
    assert isinstance(tok, FastTokenizer) and tok.family is FAMILIES[family]
    assert [p.name for p in tok.sources] == ([] if layout == "tokenizer.json" else list(FAMILIES[family].files))


def test_bert_folders_keep_bertkits_wordpiece(minilm_dir: Path) -> None:
    assert type(load_tokenizer(minilm_dir)) is BertTokenizer


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_special_tokens_and_sizes_match_transformers(ours: dict, refs: dict, family: str) -> None:
    ref = refs[family]
    for own in LAYOUTS.values():
        tok = ours[family, own]
        for name in ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token"):
            assert getattr(tok, name) == str(getattr(ref, name)), name
            assert getattr(tok, f"{name}_id") == getattr(ref, f"{name}_id"), name
        assert tok.vocab_size == len(ref) and tok.vocab == ref.get_vocab()
        assert tok.special_counts == (ref.num_special_tokens_to_add(False), ref.num_special_tokens_to_add(True))
        assert tok.model_max_length == 512


# --- encodings ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_encodings_match_transformers(ours: dict, refs: dict, data_dir: Path, family: str, layout: str) -> None:
    """Singles and pairs of real and odd-Unicode texts: every field of every encoding."""
    tok, ref, types = ours[family, LAYOUTS[layout]], refs[family], FAMILIES[family].token_types
    texts = sample_texts(data_dir, 60)
    assert assert_parity(tok, ref, texts, token_types=types) == len(texts) > 300
    assert assert_parity(tok, ref, texts, texts[7:] + texts[:7], token_types=types) == len(texts)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_question_windows_match_transformers(ours: dict, refs: dict, data_dir: Path, family: str) -> None:
    """SQuAD questions with their contexts cut into overlapping windows (QA's features), padded as a batch."""
    questions, contexts = squad(data_dir)
    n = assert_parity(ours[family, False], refs[family], questions[::200], contexts[::200],
                      token_types=FAMILIES[family].token_types, padding="longest", pad_to_multiple_of=8, **QA_WINDOWS)
    assert n > len(questions[::200])  # some contexts did need several windows


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_truncation_windows_match_or_refuse_alike(ours: dict, refs: dict, family: str, strategy: str) -> None:
    """Long stress pairs through each truncation strategy: the same windows, or both refuse (a TokenizerError
    here where the Rust reference raises or panics)."""
    ref = refs[family]
    texts = [t for t in stress_texts() if len(ref.tokenize(t)) >= 12]
    assert_parity_or_same_refusal(ours[family, False], ref, texts, texts[3:] + texts[:3], truncation=strategy,
                                  max_length=24, stride=3, return_overflowing_tokens=True,
                                  token_types=FAMILIES[family].token_types)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_one_encode_is_the_batchs_first(ours: dict, data_dir: Path, family: str) -> None:
    tok = ours[family, False]
    questions, contexts = squad(data_dir)
    one = tok.encode(questions[0], contexts[0], max_length=64, truncation="only_second", stride=16,
                     return_overflowing=True)
    batch = tok([questions[0]], [contexts[0]], max_length=64, truncation="only_second", stride=16,
                return_overflowing=True)
    assert [one.input_ids, *[w.input_ids for w in one.overflowing]] == batch["input_ids"]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_token_types_are_zero_where_the_model_reads_none(ours: dict, family: str) -> None:
    """DistilBERT, RoBERTa and XLM-R models have no second segment: a pair's types are all 0; ALBERT's and
    ELECTRA's second text is type 1, as BERT's."""
    types = ours[family, False].encode("a first text", "and a second").token_type_ids
    assert (1 in types) == FAMILIES[family].token_types and set(types) <= {0, 1}


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_stride_beyond_the_window_is_a_tokenizer_error(ours: dict, family: str) -> None:
    """Where tokenizers would panic (a BaseException a server would not catch), bertkit raises TokenizerError."""
    tok = ours[family, False]
    question = "a question with several words in it"
    room = 4  # for the context beside the question and the special tokens: less than the stride
    limit = len(tok.encode(question, add_special_tokens=False)) + tok.special_counts[1] + room
    with pytest.raises(TokenizerError, match="stride 6 must be smaller than the room left"):
        tok.encode(question, "a context " * 20, max_length=limit, stride=6, truncation="only_second",
                   return_overflowing=True)


# --- tokens, words, decoding ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_tokenize_and_decode_match_transformers(ours: dict, refs: dict, data_dir: Path, family: str) -> None:
    tok, ref = ours[family, True], refs[family]
    for text in sample_texts(data_dir, 10):
        assert tok.tokenize(text) == ref.tokenize(text), repr(text)
        ids = ref(text)["input_ids"]
        assert tok.convert_ids_to_tokens(ids) == ref.convert_ids_to_tokens(ids)
        assert tok.convert_tokens_to_ids(ref.convert_ids_to_tokens(ids)) == ids
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True), repr(text)
        assert tok.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False), repr(text)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_words_of_a_sentence_encode_as_transformers_split_into_words(family_dirs: dict, ours: dict,
                                                                     data_dir: Path, family: str) -> None:
    """NER's word alignment: each CoNLL word's ids (`encode_word`) are what transformers gives that word with
    is_split_into_words=True (RoBERTa with add_prefix_space=True, as its token-classification recipe loads it)."""
    ref = transformers.AutoTokenizer.from_pretrained(family_dirs[family, False], add_prefix_space=True)
    tok = ours[family, False]
    for words in conll_words(data_dir, "valid")[:150]:
        enc = ref(words, is_split_into_words=True, add_special_tokens=False)
        pieces = [tok.encode_word(w) for w in words]
        assert [i for p in pieces for i in p] == enc["input_ids"], words
        assert [w for w, p in enumerate(pieces) for _ in p] == enc.word_ids()


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_words_lie_where_the_text_has_them(ours: dict, data_dir: Path, family: str) -> None:
    """`words` (NER's served texts): each word is its own slice of the text, in order, and covers its tokens."""
    tok = ours[family, False]
    for text in sample_texts(data_dir, 10):
        words = tok.words(text)
        ends = [0]
        for word, start, positions in words:
            assert positions is None and word and text[start:start + len(word)] == word
            assert start >= ends[-1]
            ends.append(start + len(word))
        enc = tok.encode(text, truncation=False)
        for (a, b), w in zip(enc.offsets, enc.word_ids):
            if w is not None and b > a:
                assert any(s <= a and b <= s + len(word) for word, s, _ in words), (text, a, b)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_fill_mask_reads_the_folders_mask_token(ours: dict, refs: dict, family: str) -> None:
    """fill-mask finds the tokenizer's own mask token (<mask> or [MASK]) and tokenizes around it as transformers."""
    from bertkit.errors import ConfigError
    from bertkit.inference.fill_mask import mask_ids

    tok, ref = ours[family, False], refs[family]
    text = f"Paris is the {tok.mask_token} of France, and {tok.mask_token}."
    ids = mask_ids(tok, text, 512)
    assert ids == ref(text)["input_ids"] and ids.count(tok.mask_token_id) == 2
    other = "[MASK]" if tok.mask_token == "<mask>" else "<mask>"
    with pytest.raises(ConfigError, match=re.escape(f"no {tok.mask_token} in the text")):
        mask_ids(tok, f"Paris is the {other} of France.", 512)


# --- saving and errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_saved_folder_reads_back_in_bertkit_and_transformers(ours: dict, refs: dict, data_dir: Path,
                                                             tmp_path: Path, family: str, layout: str) -> None:
    tok = ours[family, LAYOUTS[layout]]
    tok.save_pretrained(tmp_path)
    assert all((tmp_path / p.name).read_bytes() == p.read_bytes() for p in tok.sources)
    again = load_tokenizer(tmp_path)
    assert again.family is tok.family and again.config() == tok.config()
    texts = sample_texts(data_dir, 5)
    assert again(texts)["input_ids"] == tok(texts)["input_ids"]
    back = transformers.AutoTokenizer.from_pretrained(tmp_path)
    back.model_max_length = 10**6
    assert assert_parity(again, back, texts, token_types=FAMILIES[family].token_types) == len(texts)
    assert back(texts)["input_ids"] == refs[family](texts)["input_ids"]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_tokenizer_pickles(ours: dict, family: str) -> None:
    tok = ours[family, True]
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.encode("Héllo wörld", "x").input_ids == tok.encode("Héllo wörld", "x").input_ids


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_folder_without_its_files_is_refused_naming_them(family_dirs: dict, tmp_path: Path, family: str) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        (family_dirs[family, True] / "tokenizer_config.json").read_text(encoding="utf-8"), encoding="utf-8")
    expected = " + ".join(FAMILIES[family].files)
    with pytest.raises(CheckpointError, match=re.escape(f"{tmp_path}: no tokenizer files for a {family} tokenizer: "
                                                        f"expected tokenizer.json or {expected}")):
        load_tokenizer(tmp_path)


def test_folder_without_any_tokenizer_file_says_what_is_read(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no tokenizer files: expected vocab.txt .BERT.*roberta "
                                              ".vocab.json . merges.txt.*albert .spiece.model."):
        load_tokenizer(tmp_path)


def test_bert_tokenizer_on_a_family_folder_names_the_family(family_dirs: dict) -> None:
    """Pre-training data (WordPiece only) refuses a RoBERTa folder saying what it holds."""
    with pytest.raises(CheckpointError, match="holds a roberta tokenizer, which bertkit.tokenizer.load_tokenizer"):
        BertTokenizer.from_pretrained(family_dirs["roberta", False])


def test_family_named_by_model_type_when_the_class_is_berts(family_dirs: dict, tmp_path: Path) -> None:
    """A DistilBERT folder whose tokenizer_config.json names BertTokenizer is DistilBERT's by config.json."""
    folder = family_dirs["distilbert", False]
    for name in ("tokenizer.json", "vocab.txt"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                "do_lower_case": False}))
    assert type(load_tokenizer(tmp_path)) is BertTokenizer
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    assert load_tokenizer(tmp_path).family.name == "distilbert"


@pytest.mark.parametrize("family", ["xlm-roberta", "albert"])
def test_sentencepiece_missing_is_a_clear_error(family_dirs: dict, monkeypatch: pytest.MonkeyPatch,
                                                family: str) -> None:
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import fails as if it were not installed
    with pytest.raises(TokenizerError, match=r"needs the sentencepiece and protobuf packages.*bertkit\[sentencepiece\]"):
        load_tokenizer(family_dirs[family, True])


def test_tokenize_cli_reads_a_family_folder(family_dirs: dict, refs: dict, tmp_path: Path) -> None:
    from bertkit.cli import main

    texts = ["Paris is the <mask> of France.", "naïve café 😀"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["tokenize", str(tmp_path / "in.txt"), "--model", str(family_dirs["roberta", True]),
                 "-o", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["input_ids"] for r in rows] == refs["roberta"](texts)["input_ids"]


# --- the 2,000 texts ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_encodings_match_transformers_on_2000_texts(ours: dict, refs: dict, data_dir: Path, family: str,
                                                    layout: str) -> None:
    """600 texts of each source (SST-2, CoNLL-2003, SQuAD contexts, odd Unicode) alone and as pairs, and 400 SQuAD
    questions with their contexts in windows as QA cuts them."""
    tok, ref, types = ours[family, LAYOUTS[layout]], refs[family], FAMILIES[family].token_types
    texts = sample_texts(data_dir, 600)
    assert assert_parity(tok, ref, texts, token_types=types) == len(texts) >= 2000
    assert assert_parity(tok, ref, texts, texts[1:] + texts[:1], token_types=types) == len(texts)
    questions, contexts = squad(data_dir)
    assert_parity(tok, ref, questions[::25], contexts[::25], token_types=types, truncation="only_second",
                  max_length=384, stride=128, return_overflowing_tokens=True)
