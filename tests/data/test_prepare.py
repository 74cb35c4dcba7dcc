"""End to end: prepare_pretraining on real text, shard storage, dataset, collator, CLI, bad input."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.data import PretrainingCollator, PretrainingDataConfig, PretrainingDataset, prepare_pretraining
from bertkit.data.dataset import InstanceBatch
from bertkit.data.pretraining import VocabInfo
from bertkit.errors import ConfigError, DataError, OutputError, TokenizerError


def _corpus(data_dir: Path) -> list[Path]:
    return [data_dir / "jane_austen" / "persuasion.txt", data_dir / "wikitext2" / "valid.txt"]


@pytest.fixture(scope="module")
def static_dataset(tmp_path_factory, data_dir: Path, tokenizer) -> PretrainingDataset:
    """Persuasion + WikiText-2 valid, static masks, dupe_factor 10, shards of 30 documents."""
    out = tmp_path_factory.mktemp("static")
    result = prepare_pretraining(_corpus(data_dir), out, tokenizer, PretrainingDataConfig(chunk_documents=30))
    assert result.num_shards == 3 and result.corpus.documents == 85
    return PretrainingDataset(out)


def _all_instances(ds: PretrainingDataset):
    for i in range(len(ds)):
        yield ds[i]


def test_static_masking_statistics(static_dataset: PretrainingDataset) -> None:
    vocab = static_dataset.vocab_info()
    special = {vocab.cls_id, vocab.sep_id, vocab.pad_id}
    n_tokens = n_special = n_masked = 0
    kinds = {"mask": 0, "random": 0, "same": 0}
    lengths, random_next = [], 0
    for item in _all_instances(static_dataset):
        ids, labels = item["input_ids"].numpy(), item["masked_lm_labels"].numpy()
        masked = labels != -100
        lengths.append(len(ids))
        n_tokens += len(ids)
        n_special += 3
        assert ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id
        sep_at = int((item["token_type_ids"] == 0).sum()) - 1
        assert ids[sep_at] == vocab.sep_id
        assert not masked[0] and not masked[-1] and not masked[sep_at]  # specials never masked
        assert not set(labels[masked].tolist()) & special
        n_masked += int(masked.sum())
        kinds["mask"] += int((ids[masked] == vocab.mask_id).sum())
        kinds["same"] += int((ids[masked] == labels[masked]).sum())
        random_next += int(item["next_sentence_label"])
    kinds["random"] = n_masked - kinds["mask"] - kinds["same"]
    n = len(lengths)
    fraction = n_masked / (n_tokens - n_special)
    print(f"\ninstances {n}, masked {fraction:.4f}, split", {k: round(v / n_masked, 4) for k, v in kinds.items()},
          f"random next {random_next / n:.4f}, short (<128) {np.mean(np.array(lengths) < 128):.4f}")
    assert fraction == pytest.approx(0.15, abs=0.003)
    assert kinds["mask"] / n_masked == pytest.approx(0.8, abs=0.01)
    assert kinds["random"] / n_masked == pytest.approx(0.1, abs=0.01)
    assert kinds["same"] / n_masked == pytest.approx(0.1, abs=0.01)
    assert random_next / n == pytest.approx(0.5, abs=0.01)
    assert max(lengths) <= 128
    # short targets are drawn per document pass (10%); as instances they are ~14% (more, shorter instances)
    assert 0.08 <= np.mean(np.array(lengths) < 128) <= 0.2


def test_index_stats_and_stored_tokenizer(static_dataset: PretrainingDataset) -> None:
    index = static_dataset.index
    assert index["num_instances"] == len(static_dataset)
    assert index["stats"]["shards"]["instances"] == len(static_dataset)
    assert (static_dataset.folder / "tokenizer" / "vocab.txt").is_file()
    assert static_dataset.config == PretrainingDataConfig(chunk_documents=30)
    assert index["stats"]["shards"]["truncated_sentences"] > 0  # Austen has sentences over 125 tokens


def test_collator_pads_and_labels(static_dataset: PretrainingDataset) -> None:
    collate = PretrainingCollator(static_dataset.vocab_info(), dynamic_masking=False, pad_to_multiple_of=8)
    items = [static_dataset[i] for i in range(8)]
    batch = collate(items)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
    width = batch["input_ids"].shape[1]
    assert width % 8 == 0 and width >= max(len(x["input_ids"]) for x in items)
    for b, x in enumerate(items):
        n = len(x["input_ids"])
        assert torch.equal(batch["input_ids"][b, :n], x["input_ids"])
        assert batch["attention_mask"][b].sum() == n
        assert (batch["labels"][b, n:] == -100).all()
        assert torch.equal(batch["labels"][b, :n], x["masked_lm_labels"])
    assert batch["next_sentence_label"].dtype == torch.long
    with pytest.raises(ConfigError, match="dynamic_masking=True but the dataset holds static masks"):
        PretrainingCollator(static_dataset.vocab_info(), dynamic_masking=True)(items)


def test_batched_read_equals_the_items_across_shards(static_dataset: PretrainingDataset) -> None:
    """__getitems__ (what the DataLoader calls) reads rows of several shards, in the order asked, static masks
    included, as the items give them; its items are the dataset's."""
    order = np.random.default_rng(0).permutation(len(static_dataset))[:40].tolist() + [-1, 0]
    shards = np.searchsorted(static_dataset._starts, np.array(order) % len(static_dataset), side="right")
    assert len(set(shards.tolist())) == 3
    fetched = static_dataset.__getitems__(order)
    items = [static_dataset[i] for i in order]
    want = InstanceBatch.from_items(items)
    for name in ("tokens", "lengths", "a_lengths", "is_random_next", "mask_counts", "masked_positions", "masked_labels"):
        assert np.array_equal(getattr(fetched, name), getattr(want, name)), name
    assert fetched.indices.tolist() == [i % len(static_dataset) for i in order]
    for b in (0, 17, 41):
        assert all(torch.equal(fetched[b][k], items[b][k]) for k in items[b] if k != "index")
    with pytest.raises(IndexError, match="instance .* out of range"):
        static_dataset.__getitems__([0, len(static_dataset)])


def test_dataset_pickles_without_its_memory_maps(static_dataset: PretrainingDataset) -> None:
    copy = pickle.loads(pickle.dumps(static_dataset))
    assert len(pickle.dumps(static_dataset)) < 100_000
    assert torch.equal(copy[len(copy) - 1]["input_ids"], static_dataset[-1]["input_ids"])


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# Run "b" of the test below: the same preparation in a fresh interpreter (argv: text file, output, tokenizer folder).
PREPARE_IN_A_NEW_PROCESS = """
import sys
from bertkit.data import PretrainingDataConfig, prepare_pretraining
from bertkit.tokenizer import BertTokenizer
prepare_pretraining([sys.argv[1]], sys.argv[2], BertTokenizer.from_pretrained(sys.argv[3]),
                    PretrainingDataConfig(chunk_documents=6, dupe_factor=2), workers=1)
"""


def test_output_is_byte_identical_across_runs_and_worker_counts(tmp_path: Path, data_dir: Path, tokenizer,
                                                                 vocab_folder: str) -> None:
    """The same folder, byte for byte, from this process (a), a fresh interpreter with another hash seed (b: forked
    workers share their parent's, so only a new process shows what depends on it) and two workers (c)."""
    files = [data_dir / "jane_austen" / "persuasion.txt"]
    config = PretrainingDataConfig(chunk_documents=6, dupe_factor=2)
    runs = []
    for name, workers in (("a", 1), ("b", 1), ("c", 2)):
        if name == "b":
            subprocess.run([sys.executable, "-c", PREPARE_IN_A_NEW_PROCESS, str(files[0]), str(tmp_path / name),
                            vocab_folder], check=True, capture_output=True, env={**os.environ, "PYTHONHASHSEED": "7"})
        else:
            prepare_pretraining(files, tmp_path / name, tokenizer, config, workers=workers)
        runs.append(_tree(tmp_path / name))
    assert len([k for k in runs[0] if k.startswith("shard-")]) == 4
    assert runs[0] == runs[1] == runs[2]
    other = PretrainingDataConfig(chunk_documents=6, dupe_factor=2, seed=1)
    prepare_pretraining(files, tmp_path / "d", tokenizer, other)
    assert _tree(tmp_path / "d")["shard-00000.bin"] != runs[0]["shard-00000.bin"]


@pytest.fixture(scope="module")
def dynamic_dataset(tmp_path_factory, data_dir: Path, tokenizer) -> PretrainingDataset:
    out = tmp_path_factory.mktemp("dynamic")
    config = PretrainingDataConfig(dynamic_masking=True, whole_word_mask=True, dupe_factor=1, chunk_documents=8)
    prepare_pretraining([data_dir / "jane_austen" / "persuasion.txt"], out, tokenizer, config)
    return PretrainingDataset(out)


def test_dynamic_masks_change_per_epoch_and_reproduce(dynamic_dataset: PretrainingDataset) -> None:
    assert dynamic_dataset.dynamic_masking and "masked_lm_labels" not in dynamic_dataset[0]
    vocab = dynamic_dataset.vocab_info()
    items = [dynamic_dataset[i] for i in range(32)]

    def batch(epoch: int, seed: int = 5, order=slice(None)):
        c = PretrainingCollator(vocab, dynamic_masking=True, config=dynamic_dataset.config, seed=seed)
        c.set_epoch(epoch)
        return c(items[order])

    e0, e0_again, e1 = batch(0), batch(0), batch(1)
    assert torch.equal(e0["labels"], e0_again["labels"]) and torch.equal(e0["input_ids"], e0_again["input_ids"])
    assert not torch.equal(e0["labels"], e1["labels"])
    assert not torch.equal(e0["labels"], batch(0, seed=6)["labels"])
    # a mask depends on (seed, epoch, instance), not on the batch it lands in
    assert torch.equal(batch(0, order=slice(None, None, -1))["labels"].flip(0), e0["labels"])
    labels = e0["labels"]
    for b, x in enumerate(items):
        n = len(x["input_ids"])
        non_special = n - 3
        assert int((labels[b] != -100).sum()) <= min(20, max(1, round(non_special * 0.15)))
        assert torch.equal(torch.where(labels[b, :n] != -100, labels[b, :n], e0["input_ids"][b, :n]), x["input_ids"])
    no_index = [{k: v for k, v in x.items() if k != "index"} for x in items[:4]]
    with pytest.raises(ConfigError, match="need an 'index'"):
        PretrainingCollator(vocab, dynamic_masking=True)(no_index)
    # the DataLoader's batched read gives the same batch as the items
    c = PretrainingCollator(vocab, dynamic_masking=True, config=dynamic_dataset.config, seed=5)
    fetched = c(dynamic_dataset.__getitems__(list(range(32))))
    assert all(torch.equal(fetched[k], e0[k]) for k in e0)


def test_loader_workers_give_the_same_batches(dynamic_dataset: PretrainingDataset) -> None:
    """Through a DataLoader (batched reads), two worker processes give the batches one process gives: masks are a
    function of (seed, epoch, index), so a run's data does not depend on training.num_workers."""
    from torch.utils.data import DataLoader

    c = PretrainingCollator(dynamic_dataset.vocab_info(), dynamic_masking=True, config=dynamic_dataset.config, seed=3)
    c.set_epoch(2)
    order = np.random.default_rng(1).permutation(len(dynamic_dataset))[:96].tolist()
    batches = [order[i : i + 16] for i in range(0, 96, 16)]
    runs = [list(DataLoader(dynamic_dataset, batch_sampler=batches, collate_fn=c, num_workers=w)) for w in (0, 2)]
    assert len(runs[0]) == len(runs[1]) == 6
    for a, b in zip(*runs):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert sum(int((x["labels"] != -100).sum()) for x in runs[0]) > 0


def test_whole_word_masking_masks_all_pieces(dynamic_dataset: PretrainingDataset) -> None:
    vocab = dynamic_dataset.vocab_info()
    c = PretrainingCollator(vocab, dynamic_masking=True, config=dynamic_dataset.config, seed=1)
    items = [dynamic_dataset[i] for i in range(200)]
    batch = c(items)
    pieces_seen = 0
    for b, x in enumerate(items):
        ids = x["input_ids"].tolist()
        masked = (batch["labels"][b, : len(ids)] != -100).tolist()
        word_start = None
        words: list[list[int]] = []
        for i, t in enumerate(ids):
            if t in vocab.special_ids:  # [CLS]/[SEP] are never predicted and belong to no word
                continue
            if t in vocab.continuation_ids and words and words[-1][-1] == i - 1:
                words[-1].append(i)
            else:
                words.append([i])
        for w in words:
            flags = {masked[i] for i in w}
            assert len(flags) == 1, f"instance {b}: word at {w} partly masked"
            pieces_seen += len(w) > 1 and masked[w[0]]
    assert pieces_seen > 0


class _NoMaskTokenizer:
    def __init__(self, tokenizer) -> None:
        self.vocab = {t: i for t, i in tokenizer.vocab.items() if t != "[MASK]"}
        self.tokenize = tokenizer.tokenize
        self.convert_tokens_to_ids = tokenizer.convert_tokens_to_ids


def test_bad_inputs(tmp_path: Path, tokenizer) -> None:
    with pytest.raises(TokenizerError, match=r"\[MASK\]"):
        prepare_pretraining([tmp_path], tmp_path / "o", _NoMaskTokenizer(tokenizer))
    singles = tmp_path / "singles.txt"
    singles.write_text("One sentence only.\n\nAnother lonely one.\n\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match=r"no pre-training instance.*2 single-sentence.*1 empty"):
        prepare_pretraining([singles, tmp_path / "empty.txt"], tmp_path / "o", tokenizer)
    assert not (tmp_path / "o" / "index.json").exists()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine line.\nStill fine.\n\xff\xfe broken\n")
    with pytest.raises(DataError, match=r"bad.txt:3: not valid UTF-8 at byte offset 23"):
        prepare_pretraining([bad], tmp_path / "o", tokenizer, PretrainingDataConfig(layout="lines"))


def test_long_lines_are_truncated_and_counted(tmp_path: Path, tokenizer) -> None:
    long = " ".join(["word"] * 400)
    f = tmp_path / "c.txt"
    f.write_text("".join(f"{long}\nShort one {i}.\nShort two {i}.\n\n" for i in range(6)), encoding="utf-8")
    r = prepare_pretraining([f], tmp_path / "o", tokenizer, PretrainingDataConfig(layout="lines", dupe_factor=2))
    assert r.shards.truncated_sentences == 6
    ds = PretrainingDataset(tmp_path / "o")
    assert all(len(ds[i]["input_ids"]) <= 128 for i in range(len(ds)))


def test_jsonl_gz_input(tmp_path: Path, tokenizer) -> None:
    import gzip

    f = tmp_path / "c.jsonl.gz"
    with gzip.open(f, "wt", encoding="utf-8") as g:
        for i in range(5):
            g.write(json.dumps({"text": f"Document {i} starts. It goes on. Mr. Smith ends doc {i}."}) + "\n")
    r = prepare_pretraining([f], tmp_path / "o", tokenizer, PretrainingDataConfig(dupe_factor=3))
    assert r.corpus.documents == 5 and r.corpus.sentences == 15 and r.shards.instances > 0


def test_failed_write_leaves_no_complete_looking_dataset(tmp_path: Path, tokenizer, monkeypatch) -> None:
    f = tmp_path / "c.txt"
    f.write_text("".join(f"Sentence a{i}.\nSentence b{i}.\n\n" for i in range(40)), encoding="utf-8")
    out = tmp_path / "o"
    prepare_pretraining([f], out, tokenizer, PretrainingDataConfig(layout="lines", chunk_documents=10))
    assert (out / "index.json").exists()

    import bertkit.data.shards as shards

    real_fsync, calls = shards.os.fsync, []

    def disk_full(fd):
        calls.append(fd)
        if len(calls) == 2:  # the second shard fails, as on a full disk
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(shards.os, "fsync", disk_full)
    with pytest.raises(OutputError, match="shard-00001.bin: no space left on the device"):
        prepare_pretraining([f], out, tokenizer, PretrainingDataConfig(layout="lines", chunk_documents=10, seed=2))
    assert not (out / "index.json").exists()  # the old index went first, the new one never came
    assert not list(out.glob(".*.tmp"))
    with pytest.raises(DataError, match="no index"):
        PretrainingDataset(out)


def test_reading_verifies_shards(tmp_path: Path, tokenizer) -> None:
    f = tmp_path / "c.txt"
    f.write_text("".join(f"Sentence a{i}.\nSentence b{i}.\n\n" for i in range(20)), encoding="utf-8")
    out = tmp_path / "o"
    prepare_pretraining([f], out, tokenizer, PretrainingDataConfig(layout="lines"))
    shard = out / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DataError, match="checksum"):
        PretrainingDataset(out)
    PretrainingDataset(out, verify_checksums=False)  # sizes only
    shard.write_bytes(bytes(data[:-10]))
    with pytest.raises(DataError, match="truncated"):
        PretrainingDataset(out, verify_checksums=False)


def test_cli_prepare_pretraining(tmp_path: Path, data_dir: Path, vocab_folder: str, capsys) -> None:
    from bertkit.cli import main

    out = tmp_path / "out"
    assert main(["prepare-pretraining", str(data_dir / "jane_austen" / "persuasion.txt"), "-o", str(out),
                 "--tokenizer", vocab_folder, "--dupe-factor", "1", "--whole-word-mask", "--workers", "2",
                 "--seed", "3"]) == 0
    text = capsys.readouterr().out
    for word in ("documents", "sentences", "instances", "tokens", "shards", "skipped", "peak RSS"):
        assert word in text
    config = PretrainingDataset(out).config
    assert config.whole_word_mask and config.dupe_factor == 1 and config.seed == 3
    # a rerun rebuilds its own dataset folder; a folder with other files needs --overwrite
    argv = ["prepare-pretraining", str(data_dir / "jane_austen" / "persuasion.txt"), "-o", str(out),
            "--tokenizer", vocab_folder, "--dupe-factor", "1"]
    assert main(argv) == 0
    (out / "vocab.txt").write_text("[PAD]\n")
    capsys.readouterr()
    assert main(argv) == 1 and "already holds files" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
