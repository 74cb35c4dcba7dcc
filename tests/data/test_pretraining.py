"""Pure pre-training functions: truncation, masking, instance creation (with provenance), config."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bertkit.data.config import PretrainingDataConfig
from bertkit.data.corpus import iter_documents
from bertkit.data.pretraining import VocabInfo, create_instances, create_instances_from_document, mask_tokens, truncate_seq_pair
from bertkit.errors import ConfigError, TokenizerError

# A hand-made vocabulary: specials, words and "##" pieces.
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "the", "cat", "sat", "play", "##ing", "##ful", "on"]
VOCAB = VocabInfo.from_vocab({t: i for i, t in enumerate(TOKENS)})
PAD, UNK, CLS, SEP, MASK = range(5)


def test_vocab_info() -> None:
    assert (VOCAB.pad_id, VOCAB.cls_id, VOCAB.sep_id, VOCAB.mask_id) == (0, 2, 3, 4)
    assert VOCAB.continuation_ids == {10, 11}
    assert VOCAB.random_ids == tuple(range(6, 13))  # no specials, no [unusedN]


def test_vocabulary_without_mask_is_an_error() -> None:
    with pytest.raises(TokenizerError, match=r"my/vocab.txt: no \[MASK\] token"):
        VocabInfo.from_vocab({t: i for i, t in enumerate(TOKENS) if t != "[MASK]"}, source="my/vocab.txt")


def test_truncate_seq_pair_trims_the_longer_side_from_both_ends() -> None:
    rng = random.Random(0)
    front_cuts = 0
    for _ in range(200):
        a, b = list(range(10)), list(range(100, 104))
        truncate_seq_pair(a, b, 10, rng)
        assert len(a) == 6 and b == [100, 101, 102, 103]  # only the longer side shrinks
        assert a == list(range(a[0], a[0] + 6))  # still a contiguous span
        front_cuts += a[0]
    assert front_cuts / (200 * 4) == pytest.approx(0.5, abs=0.06)  # front or back, 50/50
    a, b = [1] * 5, [2] * 5
    truncate_seq_pair(a, b, 7, rng)
    assert sorted((len(a), len(b))) == [3, 4]


def test_mask_tokens_counts_and_never_masks_specials() -> None:
    tokens = [CLS] + [6, 7, 8, 9, 12] * 8 + [SEP] + [7, 8] * 10 + [SEP] + [PAD] * 4
    n = len(tokens) - 3 - 4
    for seed in range(50):
        out, positions, labels = mask_tokens(tokens, VOCAB, random.Random(seed), 0.15, 20)
        assert len(positions) == min(20, max(1, round(n * 0.15))) == 9
        assert positions == sorted(set(positions))
        assert all(tokens[p] not in (CLS, SEP, PAD) for p in positions)
        assert labels == [tokens[p] for p in positions]
        unmasked = set(range(len(tokens))) - set(positions)
        assert all(out[i] == tokens[i] for i in unmasked)
    _, positions, _ = mask_tokens(tokens, VOCAB, random.Random(0), 0.15, 3)
    assert len(positions) == 3  # the cap
    _, positions, _ = mask_tokens([CLS, 6, SEP], VOCAB, random.Random(0), 0.15, 20)
    assert positions == [1]  # at least one


def test_mask_tokens_replacement_split() -> None:
    tokens = [CLS] + [6, 7, 8, 9, 12] * 20 + [SEP]
    rng = random.Random(1)
    kinds: Counter = Counter()
    for _ in range(2000):
        out, positions, labels = mask_tokens(tokens, VOCAB, rng, 0.15, 20)
        for p, label in zip(positions, labels):
            kinds["mask" if out[p] == MASK else "same" if out[p] == label else "random"] += 1
            assert out[p] == MASK or out[p] in VOCAB.random_ids
    total = sum(kinds.values())
    # "same" also catches random draws that hit the original token (1/7 of 10% here)
    assert kinds["mask"] / total == pytest.approx(0.8, abs=0.01)
    assert kinds["random"] / total == pytest.approx(0.1 * 6 / 7, abs=0.01)


def test_whole_word_mask_masks_every_piece() -> None:
    # play ##ing ##ful | the | cat | play ##ing ...
    tokens = [CLS] + [9, 10, 11, 6, 7, 9, 10, 8, 12] * 5 + [SEP]
    for seed in range(200):
        out, positions, _ = mask_tokens(tokens, VOCAB, random.Random(seed), 0.15, 20, whole_word_mask=True)
        chosen = set(positions)
        for i, t in enumerate(tokens):
            if t in VOCAB.continuation_ids:
                start = i
                while tokens[start] in VOCAB.continuation_ids:
                    start -= 1
                end = i
                while end + 1 < len(tokens) and tokens[end + 1] in VOCAB.continuation_ids:
                    end += 1
                word = set(range(start, end + 1))
                assert word <= chosen or not (word & chosen), f"seed {seed}: word {word} partly masked"
        assert len(positions) <= round(45 * 0.15)


def _toy_documents(rng: random.Random, n_docs: int = 30) -> list[list[list[int]]]:
    return [
        [[rng.randint(6, 12) for _ in range(rng.randint(3, 40))] for _ in range(rng.randint(2, 30))]
        for _ in range(n_docs)
    ]


def _flat(sentences) -> list[int]:
    return [t for s in sentences for t in s]


def _is_sub_span(part: list[int], whole: list[int]) -> bool:
    n = len(part)
    return any(whole[k : k + n] == part for k in range(len(whole) - n + 1))


def check_provenance(documents, instances, config: PretrainingDataConfig) -> None:
    """Every A is a span of its document's sentences; IsNext B follows A; random B is from another document."""
    for x in instances:
        assert 3 <= len(x.input_ids) <= config.max_length
        a = x.input_ids[1 : x.a_length - 1]
        b = x.input_ids[x.a_length : -1]
        assert a and b
        doc = documents[x.document]
        a_sents = doc[x.a_sentences[0] : x.a_sentences[1]]
        b_sents = documents[x.b_document][x.b_sentences[0] : x.b_sentences[1]]
        if config.dynamic_masking:
            assert _is_sub_span(a, _flat(a_sents)) and _is_sub_span(b, _flat(b_sents))
        if x.is_random_next:
            assert x.b_document != x.document
        else:
            assert x.b_document == x.document and x.b_sentences[0] == x.a_sentences[1]
        if not x.is_random_next and len(a) + len(b) < config.max_num_tokens:
            assert config.dynamic_masking is False or a + b == _flat(doc[x.a_sentences[0] : x.b_sentences[1]])


def test_instances_follow_the_reference_on_toy_documents() -> None:
    documents = _toy_documents(random.Random(3))
    shares = {}
    for balanced in (True, False):
        config = PretrainingDataConfig(max_length=64, dynamic_masking=True, balanced_nsp=balanced, dupe_factor=5)
        instances = create_instances(documents, config, VOCAB, random.Random(4))
        check_provenance(documents, instances, config)
        shares[balanced] = sum(x.is_random_next for x in instances) / len(instances)
    # the reference forces a random B for one-sentence chunks (long sentences here): biased above 50%
    assert shares[True] == pytest.approx(0.5, abs=0.03)
    assert shares[False] > shares[True] + 0.03


# The instances of test_same_seed_same_instances, made in a fresh process (argv[1]: this folder), as JSON.
INSTANCES_IN_A_NEW_PROCESS = """
import dataclasses, json, random, sys
sys.path.insert(0, sys.argv[1])
from test_pretraining import VOCAB, _toy_documents
from bertkit.data.config import PretrainingDataConfig
from bertkit.data.pretraining import create_instances_from_document
documents = _toy_documents(random.Random(3))
instances = create_instances_from_document(documents, 5, PretrainingDataConfig(max_length=64), VOCAB, random.Random(9))
print(json.dumps([dataclasses.asdict(x) for x in instances]))
"""


def test_same_seed_same_instances() -> None:
    """The instances are a function of the documents and the seed alone: fresh processes with other hash seeds
    (which reorder hashed containers and salt str hashes between processes, never within one) make this one's."""
    documents = _toy_documents(random.Random(3))
    here = create_instances_from_document(documents, 5, PretrainingDataConfig(max_length=64), VOCAB, random.Random(9))
    assert len(here) > 1
    for hash_seed in ("1", "2"):
        proc = subprocess.run([sys.executable, "-c", INSTANCES_IN_A_NEW_PROCESS, str(Path(__file__).parent)],
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert json.loads(proc.stdout) == json.loads(json.dumps([dataclasses.asdict(x) for x in here])), hash_seed


def test_single_document_chunk_is_rejected() -> None:
    with pytest.raises(ValueError, match="two documents"):
        create_instances_from_document([[[6, 7], [8]]], 0, PretrainingDataConfig(), VOCAB, random.Random(0))


def test_provenance_on_real_text(data_dir: Path, tokenizer) -> None:
    """B of an IsNext pair follows A in its document; a random B comes from another document (real corpus)."""
    files = [data_dir / "jane_austen" / "persuasion.txt", data_dir / "wikitext2" / "valid.txt"]
    docs = list(iter_documents(files))[::3]  # a third of the documents keeps the test fast
    documents = [[tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s))[:125] for s in d.sentences] for d in docs]
    documents = [[s for s in d if s] for d in documents]
    vocab = VocabInfo.from_vocab(tokenizer.vocab)
    config = PretrainingDataConfig(dynamic_masking=True, dupe_factor=2)
    instances = create_instances(documents, config, vocab, random.Random(0))
    assert len(instances) > 1000
    for x in instances:
        assert x.input_ids[0] == vocab.cls_id and x.input_ids[-1] == vocab.sep_id
        assert x.input_ids[x.a_length - 1] == vocab.sep_id
    check_provenance(documents, instances, config)
    random_share = sum(x.is_random_next for x in instances) / len(instances)
    assert random_share == pytest.approx(0.5, abs=0.03)


def test_short_target_share_per_document_pass() -> None:
    config = PretrainingDataConfig(max_length=128, dynamic_masking=True, dupe_factor=1)
    documents = _toy_documents(random.Random(5), n_docs=400)
    instances = create_instances(documents, config, VOCAB, random.Random(6))
    first = {}
    for x in instances:  # target length is drawn once per document pass, as in the reference
        first.setdefault(x.document, x.target_length)
    short = sum(t < config.max_num_tokens for t in first.values()) / len(first)
    assert short == pytest.approx(0.1, abs=0.04)
    assert all(2 <= t <= config.max_num_tokens for t in first.values())


def test_config_round_trips_and_validates(tmp_path: Path) -> None:
    c = PretrainingDataConfig(max_length=512, max_predictions_per_seq=80, whole_word_mask=True, seed=7)
    assert PretrainingDataConfig.from_json(c.to_json()) == c
    c.save(tmp_path / "c.json")
    assert PretrainingDataConfig.load(tmp_path / "c.json") == c
    with pytest.raises(ConfigError, match="masked_lm_prob"):
        PretrainingDataConfig(masked_lm_prob=1.5)
    with pytest.raises(ConfigError, match="layout"):
        PretrainingDataConfig(layout="words")
    with pytest.raises(ConfigError, match="unknown field"):
        PretrainingDataConfig.from_dict({"max_seq_len": 3})


# ---- RoBERTa's FULL-SENTENCES packing (instances="full_sentences") -----------------------------------------------


def _packing_documents(rng: random.Random, n_docs: int = 40) -> list[list[list[int]]]:
    """Documents of sentences of word ids (6..12), lengths 1..30 tokens, 1..8 sentences each."""
    return [[[rng.randint(6, 12) for _ in range(rng.randint(1, 30))] for _ in range(rng.randint(1, 8))]
            for _ in range(n_docs)]


@pytest.mark.parametrize("max_length", [16, 32, 128])
def test_full_sentence_packing_keeps_every_token_exactly_once(max_length: int) -> None:
    rng = random.Random(0)
    documents = [[s[: max_length - 3] for s in d] for d in _packing_documents(rng)]  # as tokenize_documents cuts
    config = PretrainingDataConfig(instances="full_sentences", max_length=max_length, dupe_factor=1,
                                   dynamic_masking=True)
    instances = create_instances(documents, config, VOCAB, random.Random(1))
    assert all(len(x.input_ids) <= max_length for x in instances)
    assert all(x.input_ids[0] == CLS and x.input_ids[-1] == SEP for x in instances)
    assert all(x.a_length == len(x.input_ids) and not x.is_random_next for x in instances)  # one segment
    # Unshuffle: instances in stream order (the first document of each, then position) rebuild the token stream.
    body = [x.input_ids[1:-1] for x in instances]
    assert all(b and b[0] != SEP and b[-1] != SEP for b in body)  # no separator at an instance edge
    words = Counter(t for b in body for t in b if t != SEP)
    assert words == Counter(t for d in documents for s in d for t in s)  # every token exactly once
    # every sentence sits whole inside one instance
    packed = [tuple(b) for b in body]
    for d in documents:
        for s in d:
            assert any(_contains(p, s) for p in packed)
    # instances are filled: the next sentence would not have fitted (so at most one short instance per boundary)
    short = sum(len(x.input_ids) < max_length - 30 for x in instances)
    assert short <= max(1, len(instances) // 10)


def _contains(seq: tuple[int, ...], part: list[int]) -> bool:
    n = len(part)
    return any(list(seq[i : i + n]) == part for i in range(len(seq) - n + 1))


def test_full_sentence_packing_crosses_documents_with_a_separator() -> None:
    docs = [[[6, 7]], [[8, 9], [10]], [[11, 12, 6]]]
    config = PretrainingDataConfig(instances="full_sentences", max_length=64, dupe_factor=1, dynamic_masking=True)
    (instance,) = create_instances(docs, config, VOCAB, random.Random(0))
    ids = instance.input_ids
    assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 3  # two document separators + the closing one
    segments = [tuple(x) for x in _split(ids[1:-1], SEP)]
    assert sorted(segments) == sorted([(6, 7), (8, 9, 10), (11, 12, 6)])
    # each dupe pass reads the documents in a new order
    config2 = PretrainingDataConfig(instances="full_sentences", max_length=64, dupe_factor=8, dynamic_masking=True)
    orders = {tuple(x.input_ids) for x in create_instances(docs, config2, VOCAB, random.Random(0))}
    assert len(orders) > 1


def _split(ids: list[int], sep: int) -> list[list[int]]:
    out: list[list[int]] = [[]]
    for t in ids:
        if t == sep:
            out.append([])
        else:
            out[-1].append(t)
    return out


@pytest.mark.parametrize("rate,mask_share,random_share", [(0.15, 0.8, 0.1), (0.4, 0.8, 0.1), (0.3, 1.0, 0.0)])
def test_full_sentence_static_masks_realise_the_configured_rate_and_split(rate: float, mask_share: float,
                                                                          random_share: float) -> None:
    rng = random.Random(0)
    documents = _packing_documents(rng, 200)
    config = PretrainingDataConfig(instances="full_sentences", max_length=64, dupe_factor=2, masked_lm_prob=rate,
                                   max_predictions_per_seq=64, mask_token_prob=mask_share,
                                   random_token_prob=random_share)
    instances = create_instances(documents, config, VOCAB, random.Random(1))
    kinds: Counter = Counter()
    maskable = 0
    for x in instances:
        maskable += sum(t not in (CLS, SEP, PAD) for t in x.input_ids)  # masks never land on or make a special
        for p, label in zip(x.masked_positions, x.masked_labels):
            kinds["mask" if x.input_ids[p] == MASK else "same" if x.input_ids[p] == label else "random"] += 1
    total = sum(kinds.values())
    assert total / maskable == pytest.approx(rate, abs=0.01)
    assert kinds["mask"] / total == pytest.approx(mask_share, abs=0.015)
    assert kinds["random"] / total == pytest.approx(random_share * 6 / 7, abs=0.015)  # 1/7 of draws hit the original


def test_data_prepared_before_the_rename_still_loads() -> None:
    """One name per concept (`max_length`); a config written as `max_seq_length` reads as max_length."""
    from bertkit.data import PretrainingDataConfig

    old = PretrainingDataConfig(max_length=64).to_dict()
    old["max_seq_length"] = old.pop("max_length")
    assert PretrainingDataConfig.from_dict(old).max_length == 64
