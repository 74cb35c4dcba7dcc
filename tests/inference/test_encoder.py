"""Fast Encoder: equal to the plain padded path on real MiniLM weights and WikiText-2, in input order."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from inference_helpers import minilm_folder, reference_embed_texts, tokenizer_for, wikitext_paragraphs

from bertkit.errors import ConfigError
from bertkit.inference.encoder import MAX_PADDING_TO_PAD, Encoder, padded_width, plan_batches, runs_padded
from bertkit.model import BertModel


@pytest.fixture(scope="module")
def minilm():
    folder = minilm_folder()
    return folder, BertModel.from_pretrained(folder), tokenizer_for(folder)


def test_plan_batches_respects_both_limits_and_covers_every_index() -> None:
    lengths = [5, 100, 7, 50, 50, 3, 9, 100]
    batches = plan_batches(lengths, batch_size=3, max_tokens_per_batch=150)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3 and max(lengths[i] for i in b) * len(b) <= 150 or len(b) == 1
    assert [lengths[i] for b in batches for i in b] == sorted(lengths, reverse=True)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_encoder_equals_reference_path_in_input_order(minilm, pooling: str) -> None:
    folder, model, tok = minilm
    texts = wikitext_paragraphs(48) + ["short", "a b c"]
    encoder = Encoder(model, tok, precision="fp32", max_length=256)
    fast = encoder.encode(texts, pooling=pooling, normalize=True, batch_size=32).numpy()
    slow = reference_embed_texts(model, tok, texts, pooling=pooling, normalize=True, max_length=256)
    assert np.abs(fast - slow).max() <= 1e-5
    # One text at a time gives the same rows: the order is the input order.
    alone = encoder.encode([texts[7]], pooling=pooling, normalize=True).numpy()
    assert np.abs(alone[0] - fast[7]).max() <= 1e-5


def test_encoder_from_folder_matches_sentence_transformers(monkeypatch) -> None:
    st = pytest.importorskip("sentence_transformers")
    folder = minilm_folder()
    texts = wikitext_paragraphs(16)
    encoder = Encoder(folder, precision="fp32")  # the folder's defaults: mean pooling, normalize
    ours = encoder.encode(texts, batch_size=4, max_tokens_per_batch=600)
    theirs = torch.from_numpy(st.SentenceTransformer(folder, device="cpu").encode(texts, batch_size=8))
    assert F.cosine_similarity(ours, theirs).min() > 0.99999
    assert (ours - theirs).abs().max() < 1e-5


def test_bf16_stays_close_to_fp32(minilm) -> None:
    _, model, tok = minilm
    texts = [x[:200] for x in wikitext_paragraphs(8)]
    ref = Encoder(model, tok, precision="fp32").encode(texts)
    bf16 = Encoder(model, tok, precision="bf16").encode(texts)
    assert F.cosine_similarity(ref, bf16).min() >= 0.999  # int8: tests/inference/test_int8.py


@pytest.mark.filterwarnings("ignore:.*were truncated")
def test_bf16_on_a_cpu_pads_the_batches_of_little_padding(minilm) -> None:
    """fp32 runs the linear layers on the real tokens of each batch (a new row count in nearly every batch). bf16 on
    a CPU runs every position of a batch whose padding is at most MAX_PADDING_TO_PAD (count x width, widths in steps
    of 16: oneDNN's bf16 kernels, built per matrix shape, are built again only for a new width or count), and packs
    a batch of short texts, where the padding would cost more."""
    _, model, tok = minilm
    texts = wikitext_paragraphs(32) + ["a short one .", "two words", "the cat sat on the mat ."] * 6
    rows: dict[str, list[int]] = {}
    for precision in ("fp32", "bf16"):
        enc = Encoder(model, tok, precision=precision, max_length=256)
        seen: list[int] = []
        handle = enc.bert.encoder.layer[0].intermediate.dense.register_forward_pre_hook(
            lambda _module, args: seen.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
        enc.encode(texts, batch_size=8)
        handle.remove()
        rows[precision] = seen
    lengths = [len(x) for x in enc.tokenize(texts)]
    batches = plan_batches(lengths, 8, 8192, 512)
    real = [sum(lengths[i] for i in b) for b in batches]
    padded = [len(b) * padded_width(lengths[b[0]], 512) for b in batches]
    chosen = [runs_padded([lengths[i] for i in b], padded_width(lengths[b[0]], 512)) for b in batches]
    assert rows["fp32"] == real
    assert rows["bf16"] == [p if pad else r for p, r, pad in zip(padded, real, chosen)]
    assert any(chosen) and not all(chosen) and any(p != r for p, r in zip(padded, real))


def test_runs_padded_is_the_padding_fraction_against_the_bound() -> None:
    assert runs_padded([128, 120, 116], 128)  # 36 of 384 positions padding: 9.4%
    assert not runs_padded([13, 9, 11], 16)  # 15 of 48: 31%
    assert not runs_padded([14] * 7 + [2], 16)  # 28 of 128: 22%
    assert MAX_PADDING_TO_PAD == 0.125 and runs_padded([14, 14], 16)  # 4 of 32: exactly the bound, padded


def test_long_texts_are_truncated_with_a_warning(minilm) -> None:
    _, model, tok = minilm
    enc = Encoder(model, tok, max_length=16)
    with pytest.warns(UserWarning, match="1 of 2 texts were longer than 16 tokens"):
        out = enc.encode(["word " * 100, "short"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 14 words fill the 16 tokens exactly: no warning
        kept = enc.encode(["word " * 14, "short"])  # what the cut keeps: [CLS], 14 words, [SEP]
    assert out.shape == (2, 384) and (out - kept).abs().max() <= 1e-6
    # ... which is not what the whole text gives (0.42 apart), nor 13 words (0.02 apart)
    assert (Encoder(model, tok, max_length=128).encode(["word " * 100])[0] - kept[0]).abs().max() > 0.1
    assert (enc.encode(["word " * 13])[0] - kept[0]).abs().max() > 1e-3


def test_bad_options_are_clear_errors(minilm) -> None:
    _, model, tok = minilm
    with pytest.raises(ConfigError, match="precision"):
        Encoder(model, tok, precision="fp8")
    with pytest.raises(ConfigError, match="pooling"):
        Encoder(model, tok).encode(["x"], pooling="max")
    with pytest.raises(ConfigError, match="tokenizer"):
        Encoder(model)
    with pytest.raises(ConfigError, match="strings"):
        Encoder(model, tok).encode(["ok", 3])  # type: ignore[list-item]


def test_encoder_runs_the_callers_model_without_changing_it(minilm) -> None:
    """fp32 shares the caller's weights (no copy) and leaves its train/eval mode as it was; bf16 copies."""
    _, model, tok = minilm
    model.train()
    enc = Encoder(model, tok, precision="fp32")
    assert enc.bert is model
    first = enc.encode(["dropout must be off while encoding"])
    assert model.training
    assert torch.equal(first, enc.encode(["dropout must be off while encoding"]))
    assert Encoder(model, tok, precision="bf16").bert is not model
    assert next(model.parameters()).dtype == torch.float32
    model.eval()


def test_auto_precision_follows_the_cpu(monkeypatch, minilm, capsys, tmp_path) -> None:
    """auto = bf16 on CPUs with bf16 matrix units (AVX512-BF16, AMX), fp32 elsewhere; int8 only when asked; the
    choice is printed by `bertkit embed` and reported by the encoder."""
    from bertkit import runtime
    from bertkit.cli import main
    from bertkit.inference.precision import choose_precision

    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16", "avx512_vnni"})
    assert choose_precision("auto", cpu)[0] == "bf16"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "amx_bf16", "amx_tile"})
    assert choose_precision("auto", cpu)[0] == "bf16"
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx2", "fma", "avx512_vnni"})  # VNNI alone: int8 units only
    assert choose_precision("auto", cpu) == ("fp32", "auto: this CPU has no bf16 matrix units, where bf16 runs "
                                                     "slower than fp32")
    assert choose_precision("int8", cpu) == ("int8", "as asked")
    with pytest.raises(ConfigError, match="precision"):
        choose_precision("fp8", cpu)
    _, model, tok = minilm
    enc = Encoder(model, tok, precision="auto")
    assert (enc.precision, enc.bert is model) == ("fp32", True)  # fp32 shares the caller's weights
    monkeypatch.setattr(runtime, "cpu_flags", lambda: {"avx512_bf16"})
    enc = Encoder(model, tok, precision="auto")
    assert enc.precision == "bf16" and next(enc.bert.parameters()).dtype == torch.bfloat16
    (tmp_path / "in.txt").write_text("one text\nanother text\n")
    assert main(["embed", "--model", str(minilm_folder()), str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.npy")]) == 0
    assert "precision: bf16 (auto: this CPU has bf16 matrix units" in capsys.readouterr().err
    assert main(["embed", "--model", str(minilm_folder()), str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.npy"),
                 "--precision", "fp32"]) == 0
    assert "precision: fp32 (as asked)" in capsys.readouterr().err


def test_real_cpu_flags_are_read() -> None:
    from bertkit import runtime

    flags = runtime.cpu_flags()
    assert not flags or "sse2" in flags  # every x86-64 CPU has SSE2; elsewhere the set may be empty
    assert runtime.cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


MALLOC_SCRIPT = """
import os, torch
from bertkit.inference.encoder import Encoder
from bertkit.model import BertConfig, BertModel
from bertkit.tokenizer import BertTokenizer
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])
encoder = Encoder(BertModel(config), tokenizer, device="cpu")
before = rss_mb()
x = torch.ones(64 * 2**20)  # 256 MiB, touched
del x
print(encoder.keeps_freed_memory, rss_mb() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc setting")
@pytest.mark.parametrize("opt_out", [False, True])
def test_cpu_encoder_keeps_freed_memory_unless_opted_out(opt_out: bool) -> None:
    """A CPU Encoder makes malloc keep freed blocks (batches reuse warm pages, bertkit.runtime); BERTKIT_MALLOC=default
    leaves glibc alone. In a fresh process, since the setting is process-wide."""
    env = {**os.environ, "BERTKIT_MALLOC": "default" if opt_out else ""}
    out = subprocess.run([sys.executable, "-c", MALLOC_SCRIPT], capture_output=True, text=True, env=env, check=True)
    applied, kept_mb = out.stdout.split()
    if opt_out:
        assert applied == "False" and float(kept_mb) < 50  # glibc returned the mmap'd block on free
    else:
        assert applied == "True" and float(kept_mb) > 200  # the freed 256 MiB stay, ready for the next batch
