"""BertTokenizer: encodings, truncation windows, padding, batches, decoding, loading and saving."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from bertkit.errors import CheckpointError, TokenizerError
from bertkit.tokenizer import BatchEncoding, BertTokenizer, Encoding, load_vocab


@pytest.fixture()
def tok(tiny_vocab: list[str]) -> BertTokenizer:
    return BertTokenizer(tiny_vocab)


def test_single_and_pair(tok: BertTokenizer) -> None:
    enc = tok.encode("The cat sat.")
    assert tok.convert_ids_to_tokens(enc.input_ids) == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert enc.token_type_ids == [0] * 6 and enc.attention_mask == [1] * 6
    assert enc.special_tokens_mask == [1, 0, 0, 0, 0, 1]
    assert enc.offsets == [(0, 0), (0, 3), (4, 7), (8, 11), (11, 12), (0, 0)]
    assert enc.word_ids == [None, 0, 1, 2, 3, None]
    pair = tok.encode("the cat", "Unaffable!")
    assert tok.convert_ids_to_tokens(pair.input_ids) == [
        "[CLS]", "the", "cat", "[SEP]", "un", "##aff", "##able", "!", "[SEP]"]
    assert pair.token_type_ids == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert pair.sequence_ids == [None, 0, 0, None, 1, 1, 1, 1, None]
    assert pair.word_ids == [None, 0, 1, None, 0, 0, 0, 1, None]
    assert pair.offsets[4:8] == [(0, 2), (2, 5), (5, 9), (9, 10)]


def test_offsets_point_into_the_original_text(tok: BertTokenizer) -> None:
    text = "  CAFÉ\u200b中文  Hello"
    enc = tok.encode(text)
    tokens = tok.convert_ids_to_tokens(enc.input_ids)
    assert tokens == ["[CLS]", "cafe", "中", "文", "hello", "[SEP]"]
    assert [text[a:b] for a, b in enc.offsets[1:-1]] == ["CAFÉ", "中", "文", "Hello"]


def test_special_tokens_in_text_kept_whole(tok: BertTokenizer) -> None:
    enc = tok.encode("hello [MASK] world[SEP]")
    assert tok.convert_ids_to_tokens(enc.input_ids)[1:-1] == ["hello", "[MASK]", "world", "[SEP]"]
    assert tok.tokenize("[mask]") == ["[", "[UNK]", "]"]  # matched case-sensitively, like HF


def test_truncation_strategies(tok: BertTokenizer) -> None:
    a, b = "a b c a b c", "the cat sat"
    enc = tok.encode(a, b, max_length=8, truncation="longest_first")
    assert len(enc) == 8 and enc.sequence_ids.count(0) == 3 and enc.sequence_ids.count(1) == 2
    enc = tok.encode(a, b, max_length=8, truncation="only_first")
    assert enc.sequence_ids.count(0) == 2 and enc.sequence_ids.count(1) == 3
    with pytest.raises(TokenizerError):
        tok.encode(a, b, max_length=8, truncation="only_second")  # 3 tokens cannot lose 4
    assert len(tok.encode(a, b, max_length=8, truncation=False)) == 12
    with pytest.raises(TokenizerError):
        tok.encode("a b c", truncation="only_second", max_length=4)  # no second sequence to cut


def test_overflow_windows_overlap_by_stride(tok: BertTokenizer) -> None:
    """stride is the overlap between consecutive windows (HF's return_overflowing_tokens semantics)."""
    text = " ".join(["a", "b", "c"] * 4)  # 12 tokens
    enc = tok.encode("the", text, max_length=9, truncation="only_second", stride=2, return_overflowing=True)
    windows = [enc, *enc.overflowing]
    spans = [[o for o, s in zip(w.offsets, w.sequence_ids) if s == 1] for w in windows]
    assert [len(s) for s in spans] == [5, 5, 5, 3]
    for prev, nxt in zip(spans, spans[1:]):
        assert prev[-2:] == nxt[:2]  # two tokens of overlap
    assert spans[-1][-1] == (len(text) - 1, len(text))
    assert all(w.input_ids[:3] == windows[0].input_ids[:3] for w in windows)
    assert tok.encode("the", text, max_length=9, truncation="only_second").overflowing == []


def test_padding(tok: BertTokenizer) -> None:
    batch = tok(["the cat", "the cat sat on the mat"], padding=True)
    assert [len(e) for e in batch] == [8, 8]
    assert batch[0].attention_mask == [1, 1, 1, 1, 0, 0, 0, 0]
    assert batch[0].input_ids[-1] == tok.pad_token_id and batch[0].offsets[-1] == (0, 0)
    assert batch[0].special_tokens_mask[-1] == 1 and batch[0].word_ids[-1] is None
    batch = tok(["the cat"], padding="max_length", max_length=10)
    assert len(batch[0]) == 10
    batch = tok(["the cat sat"], padding="longest", pad_to_multiple_of=8)
    assert len(batch[0]) == 8
    assert len(tok(["the cat"], pad_to_multiple_of=8)[0]) == 4  # no padding asked for


def test_batch_overflow_mapping_and_tensors(tok: BertTokenizer) -> None:
    batch = tok(["the", "a b c"], ["a b c a b c", "cat"], max_length=7, truncation="only_second", stride=1,
                return_overflowing=True)
    assert isinstance(batch, BatchEncoding) and isinstance(batch[0], Encoding)
    assert batch.overflow_to_sample_mapping == [0, 0, 0, 1]
    t = batch.to_tensors()
    assert set(t) == {"input_ids", "token_type_ids", "attention_mask"}
    assert t["input_ids"].shape == (4, 7) and t["input_ids"].dtype.is_floating_point is False
    assert t["attention_mask"][3].tolist() == [1, 1, 1, 1, 1, 1, 1]
    assert t["input_ids"][0].tolist() == batch[0].input_ids
    short = tok(["the", "the cat sat"]).to_tensors()
    assert short["input_ids"][0].tolist()[-2:] == [tok.pad_token_id] * 2
    assert short["attention_mask"].sum().item() == 3 + 5


def test_batch_matches_single(tok: BertTokenizer) -> None:
    texts = ["the cat", "Unaffable!", "", "中文 hello"]
    batch = tok(texts, num_workers=1)
    assert [e.input_ids for e in batch] == [tok.encode(t).input_ids for t in texts]
    parallel = tok(texts * 10, num_workers=2)
    assert [e.offsets for e in parallel] == [tok.encode(t).offsets for t in texts * 10]


def test_decode(tok: BertTokenizer) -> None:
    ids = tok.encode("the cat, unaffable sat!", "hello [UNK] world").input_ids
    assert tok.decode(ids) == "the cat, unaffable sat! hello world"
    assert tok.decode(ids, skip_special_tokens=False) == "[CLS] the cat, unaffable sat! [SEP] hello [UNK] world [SEP]"
    assert tok.decode(tok.convert_tokens_to_ids(["don", "'", "t", "s", "."])) == "don ' t s."
    assert tok.decode(tok.convert_tokens_to_ids(["don", "'", "t"]), clean_up_tokenization_spaces=True) == "don't"


def test_decode_matches_reference(vocab_dir: str) -> None:
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertTokenizerFast.from_pretrained(vocab_dir)
    tok = BertTokenizer.from_pretrained(vocab_dir)
    for text in ["Hello, world! Isn't it great? I'm sure you've done it.", "un ##known [MASK] x", "中文 é ...",
                 "He said: \"do not\" and they're 's fine."]:
        ids = ref(text)["input_ids"]
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)


def test_conversions(tok: BertTokenizer) -> None:
    assert tok.convert_tokens_to_ids("cat") == tok.vocab["cat"]
    assert tok.convert_tokens_to_ids(["cat", "nope"]) == [tok.vocab["cat"], tok.unk_token_id]
    assert tok.convert_ids_to_tokens([tok.cls_token_id, tok.sep_token_id]) == ["[CLS]", "[SEP]"]
    assert tok.vocab_size == len(tok) and tok.mask_token_id == tok.vocab["[MASK]"]


def test_pickle_round_trip(tok: BertTokenizer) -> None:
    tok.encode("the cat")
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.encode("the cat sat").input_ids == tok.encode("the cat sat").input_ids


# --- loading and saving ---------------------------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path: Path, tiny_vocab: list[str]) -> None:
    tok = BertTokenizer(tiny_vocab, lowercase=False, strip_accents=True, model_max_length=128)
    tok.save_pretrained(tmp_path / "tok")
    names = sorted(p.name for p in (tmp_path / "tok").iterdir())
    assert names == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    assert (tmp_path / "tok" / "vocab.txt").read_text().split("\n")[:3] == ["[PAD]", "[UNK]", "[CLS]"]
    loaded = BertTokenizer.from_pretrained(tmp_path / "tok")
    assert loaded.vocab == tok.vocab and not loaded.lowercase and loaded.strip_accents is True
    assert loaded.model_max_length == 128
    assert BertTokenizer.from_pretrained(tmp_path / "tok" / "vocab.txt").vocab == tok.vocab


def test_saved_folder_loads_in_transformers(tmp_path: Path, vocab_dir: str) -> None:
    transformers = pytest.importorskip("transformers")
    tok = BertTokenizer.from_pretrained(vocab_dir, lowercase=False)
    tok.save_pretrained(tmp_path)
    ref = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    text = "Héllo, WORLD! [MASK] 中文"
    assert ref(text)["input_ids"] == tok.encode(text).input_ids


def test_hf_folder_settings(tmp_path: Path, tiny_vocab: list[str]) -> None:
    (tmp_path / "vocab.txt").write_text("\n".join(tiny_vocab) + "\n")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": False, "tokenize_chinese_chars": False, "model_max_length": 1000000000000000019884624838656}))
    tok = BertTokenizer.from_pretrained(tmp_path)
    assert not tok.lowercase and not tok.tokenize_chinese_chars and tok.model_max_length == 512
    assert BertTokenizer.from_pretrained(tmp_path, lowercase=True).lowercase
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"lowercase": True, "strip_accents": False}))
    tok = BertTokenizer.from_pretrained(tmp_path)
    assert tok.lowercase and tok.tokenize("CAFÉ") == ["[UNK]"]  # lower-cased, accent kept: not in vocab


def test_loading_from_tokenizer_json_settings(vocab_dir: str) -> None:
    tok = BertTokenizer.from_pretrained(vocab_dir)
    assert tok.lowercase and tok.model_max_length == 512 and tok.tokenize_chinese_chars


@pytest.mark.parametrize("content, message", [
    ("", "empty"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[UNK]\n", "vocab.txt:5: duplicate token '[UNK]' (first on line 2)"),
    ("[PAD]\n\n[CLS]\n", "vocab.txt:2: empty token"),
])
def test_bad_vocab_files(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "vocab.txt").write_text(content)
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        load_vocab(tmp_path / "vocab.txt")
    with pytest.raises(CheckpointError):
        BertTokenizer.from_pretrained(tmp_path)


def test_vocab_missing_special_tokens(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(CheckpointError, match=r"vocab\.txt.*\[CLS\], \[SEP\] missing"):
        BertTokenizer.from_pretrained(tmp_path)
    with pytest.raises(TokenizerError, match=r"\[UNK\]"):
        BertTokenizer(["[PAD]", "[CLS]", "[SEP]"])


def test_missing_folder_or_vocab(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no vocab.txt"):
        BertTokenizer.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="no such"):
        BertTokenizer.from_pretrained(tmp_path / "absent")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    with pytest.raises(CheckpointError, match="tokenizer_config.json: not valid JSON"):
        BertTokenizer.from_pretrained(tmp_path)


def test_atomic_save_leaves_no_temp_files(tmp_path: Path, tiny_vocab: list[str]) -> None:
    BertTokenizer(tiny_vocab).save_pretrained(tmp_path)
    BertTokenizer(tiny_vocab).save_pretrained(tmp_path)  # overwrite in place
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_vocabulary_without_pad_is_accepted_until_padding_is_needed(tmp_path) -> None:
    """google-research/bert's tokenization_test.py vocabulary has no [PAD]; both references accept it."""
    from bertkit.errors import TokenizerError
    from bertkit.tokenizer import BertTokenizer

    vocab = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn", "##ing", ","]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizer.from_pretrained(tmp_path / "vocab.txt")
    assert tok.pad_token_id is None
    assert tok.tokenize("UNwant\u00E9d,running") == ["un", "##want", "##ed", ",", "runn", "##ing"]
    same = tok(["unwanted", "want running"])  # equal lengths: no padding needed
    assert same.to_tensors()["input_ids"].shape == (2, 5)
    with pytest.raises(TokenizerError, match=r"no \[PAD\] token"):
        tok(["unwanted running", "running"], padding=True)
    with pytest.raises(TokenizerError, match=r"no \[PAD\] token"):
        tok(["unwanted running", "running"]).to_tensors()
