"""A folder's sentence-transformers files, written and read by one module (`bertkit.model.pooling`): what is written
is read back, sentence-transformers 6's own layout is read too, and an embedding head's folder embeds in
sentence-transformers as in bertkit for every pooling and normalisation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.model import BertConfig
from bertkit.model.heads import BertForEmbedding
from bertkit.model.pooling import folder_defaults, write_sentence_transformers

TEXTS = ["A cat sat on the mat.", "Rain again", "A much longer sentence, with a comma and more words in it than most."]


@pytest.mark.parametrize("pooling, normalize, length", [("mean", True, 256), ("cls", False, 64)])
def test_what_is_written_is_read_back(tmp_path: Path, pooling: str, normalize: bool, length: int) -> None:
    write_sentence_transformers(tmp_path, pooling, normalize, length, hidden_size=32)
    assert folder_defaults(tmp_path) == {"pooling": pooling, "normalize": normalize, "max_length": length}
    modules = json.loads((tmp_path / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling", *(["2_Normalize"] if normalize else [])]
    switches = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert switches["word_embedding_dimension"] == 32 and sum(v is True for v in switches.values()) == 1


def test_sentence_transformers_6_pooling_mode_is_read(tmp_path: Path) -> None:
    """sentence-transformers 6 writes one `pooling_mode` name instead of the switches."""
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"embedding_dimension": 32, "pooling_mode": "cls"}')
    assert folder_defaults(tmp_path) == {"pooling": "cls"}


@pytest.mark.parametrize("pooling, normalize", [("mean", True), ("cls", False)])
def test_an_embedding_folder_embeds_alike_in_sentence_transformers(tmp_path: Path, minilm_dir: Path, pooling: str,
                                                                   normalize: bool) -> None:
    """A random tiny BertForEmbedding saved with MiniLM's vocabulary: SentenceTransformer(folder) and
    bertkit.load(folder).encode give the same vectors (cosine >= 0.99999), normalised only when the head is."""
    st = pytest.importorskip("sentence_transformers")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, task="embedding",
                        task_settings={"pooling": pooling, "normalize": normalize, "max_length": 40})
    BertForEmbedding(config).save_pretrained(str(tmp_path / "m"))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, tmp_path / "m" / name)
    theirs = st.SentenceTransformer(str(tmp_path / "m"), device="cpu")
    assert theirs.max_seq_length == 40
    a = theirs.encode(TEXTS, convert_to_numpy=True)
    b = np.asarray(bertkit.load(tmp_path / "m").encode(TEXTS, precision="fp32"))
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() >= 0.99999
    assert np.allclose(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1), rtol=1e-4)
    assert np.allclose(np.linalg.norm(b, axis=1), 1, atol=1e-5) == normalize


@pytest.mark.parametrize("autocast", [False, True])
def test_mean_pooling_is_the_mean_of_the_real_tokens_in_the_hidden_states_precision(autocast: bool) -> None:
    """Random masks (every row one real token at least): the masked mean, in float32 under bf16 autocast too."""
    from bertkit.model.pooling import mean_pool

    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        batch, seq = (int(v) for v in torch.randint(1, 9, (2,), generator=g))
        hidden = torch.randn(batch, seq, 16, generator=g)
        mask = (torch.rand(batch, seq, generator=g) < 0.6).long()
        mask[:, 0] = 1
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            pooled = mean_pool(hidden, mask)
        expected = torch.stack([hidden[i][mask[i].bool()].mean(0) for i in range(batch)])
        assert pooled.dtype == torch.float32
        assert torch.allclose(pooled, expected, atol=1e-6)
