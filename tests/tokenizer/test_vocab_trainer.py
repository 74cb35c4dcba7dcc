"""WordPiece vocabulary training: hand-computed merges, options, and the quality target on real text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertkit.errors import ConfigError
from bertkit.tokenizer import BertTokenizer
from bertkit.tokenizer.trainer import DEFAULT_SPECIAL_TOKENS, train_tokenizer, train_wordpiece

# The classic toy corpus: hug x10, pug x5, pun x12, bun x4, hugs x5.
TOY = ["hug"] * 10 + ["pug"] * 5 + ["pun"] * 12 + ["bun"] * 4 + ["hugs"] * 5
N_INITIAL = len(DEFAULT_SPECIAL_TOKENS) + 2 * len(set("hugpbns"))  # every character, also as ##character


def test_vocabulary_layout() -> None:
    vocab = train_wordpiece(TOY, vocab_size=N_INITIAL + 3, min_frequency=1)
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert set(vocab[5:N_INITIAL]) == set("hugpbns") | {"##" + c for c in "hugpbns"}
    assert len(vocab) == N_INITIAL + 3 and len(set(vocab)) == len(vocab)


def test_score_criterion_first_merge() -> None:
    # count(ab)/(count(a)count(b)): (##g, ##s) = 5/(20*5) = 0.05 beats every (x, ##u) pair at 1/36.
    vocab = train_wordpiece(TOY, vocab_size=N_INITIAL + 1, min_frequency=1, criterion="score")
    assert vocab[-1] == "##gs"


def test_likelihood_criterion_first_merge() -> None:
    # count(ab) * log(count(ab) N / (count(a) count(b))) with N = 113 units: (##u, ##g) gains 20*log(3.14) = 22.9,
    # more than (p, ##u) 19.4, (##u, ##n) 18.3, (h, ##u) 17.2 and (##g, ##s) 8.7.
    vocab = train_wordpiece(TOY, vocab_size=N_INITIAL + 1, min_frequency=1)
    assert vocab[-1] == "##ug"


def test_min_frequency_and_stop() -> None:
    # With min_frequency 13 only (##u, ##g) (20), (p, ##u) (17), (##u, ##n) (16) and (h, ##u) (15) qualify at
    # first. After ##ug: (##u, ##n) 16 and (h, ##ug) 15; after ##un: (h, ##ug) 15; after hug no pair reaches 13
    # ((p, ##un) 12), so training stops there, far below vocab_size.
    vocab = train_wordpiece(TOY, vocab_size=1000, min_frequency=13)
    assert vocab[N_INITIAL:] == ["##ug", "##un", "hug"]


def test_cased_keeps_capitals() -> None:
    texts = ["Hello World hello world HELLO"] * 3
    assert "H" in train_wordpiece(texts, 40, 1, lowercase=False)
    assert "H" not in train_wordpiece(texts, 40, 1)


def test_every_process_learns_the_same_vocabulary() -> None:
    """Training is a function of its inputs alone: fresh interpreters with other hash seeds (which reorder sets and
    hashed containers between processes, never within one) learn this process's vocabulary, token for token and in
    the same order; the alphabet comes sorted, the ties of equal counts (limit_alphabet) included."""
    texts = ["Hello World hello world HELLO", "naïve café über straße", "zebra yak xenon wolf vole", *TOY]
    runs = {"cased": dict(vocab_size=70, min_frequency=1, lowercase=False),
            "limited": dict(vocab_size=50, limit_alphabet=12)}
    here = {name: train_wordpiece(texts, **kw) for name, kw in runs.items()}
    alphabet = here["cased"][5 : 5 + len(set("".join(texts).replace(" ", "")))]
    assert alphabet == sorted(alphabet)
    code = ("import json, sys; from bertkit.tokenizer.trainer import train_wordpiece; "
            "texts, runs = json.load(sys.stdin); "
            "print(json.dumps({name: train_wordpiece(texts, **kw) for name, kw in runs.items()}))")
    for seed in ("1", "2", "3"):
        out = subprocess.run([sys.executable, "-c", code], input=json.dumps([texts, runs]), capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": seed}, check=True, encoding="utf-8")
        assert json.loads(out.stdout) == here, f"PYTHONHASHSEED={seed}"


def test_bad_options() -> None:
    with pytest.raises(ConfigError):
        train_wordpiece(TOY, vocab_size=0)
    with pytest.raises(ConfigError):
        train_wordpiece(TOY, vocab_size=10, criterion="bpe")


def test_trained_tokenizer_round_trip(tmp_path: Path) -> None:
    tok = train_tokenizer(TOY * 3, vocab_size=N_INITIAL + 6, min_frequency=1)
    assert isinstance(tok, BertTokenizer)
    assert list(tok.vocab)[N_INITIAL:] == ["##ug", "##un", "hug", "pun", "pug", "bun"]  # the six merges, in order
    assert tok.tokenize("hugs pun") == ["hug", "##s", "pun"]  # no "hugs" or "##ugs" among them
    tok.save_pretrained(tmp_path)
    assert BertTokenizer.from_pretrained(tmp_path).vocab == tok.vocab


def test_training_from_files(tmp_path: Path) -> None:
    f = tmp_path / "corpus.txt"
    f.write_text("\n".join(TOY) + "\n", encoding="utf-8")
    assert train_wordpiece([f], N_INITIAL + 2, 1) == train_wordpiece(TOY, N_INITIAL + 2, 1)


def test_8k_vocabulary_quality_target(data_dir: Path) -> None:
    """8k vocabulary on WikiText-2 valid + tiny Shakespeare + Austen: < 1.4 tokens/word, < 0.5% [UNK] on
    WikiText-2 test, trained in well under two minutes."""
    files = [data_dir / "wikitext2" / "valid.txt", data_dir / "tiny_shakespeare" / "input.txt",
             *sorted((data_dir / "jane_austen").glob("*.txt"))]
    start = time.perf_counter()
    tok = train_tokenizer(files, vocab_size=8000, min_frequency=2)
    seconds = time.perf_counter() - start
    assert tok.vocab_size == 8000
    held_out = [line for line in (data_dir / "wikitext2" / "test.txt").read_text(encoding="utf-8").split("\n")
                if line.strip()]
    batch = tok(held_out, truncation=False, add_special_tokens=False)
    n_tokens = sum(len(e) for e in batch)
    n_unk = sum(e.input_ids.count(tok.unk_token_id) for e in batch)
    n_words = sum(len(line.split()) for line in held_out)
    print(f"8k WordPiece: {n_tokens / n_words:.3f} tokens/word, {100 * n_unk / n_tokens:.4f}% [UNK], "
          f"trained in {seconds:.1f}s")
    assert n_tokens / n_words < 1.4
    assert n_unk / n_tokens < 0.005
    assert seconds < 120
