"""DistilBERT, RoBERTa, XLM-R, ALBERT and ELECTRA folders as transformers writes them compute in bertkit what they
compute in transformers: every layer's hidden states and each head's logits, float32, on a batch with padding
(RoBERTa's positions depend on it), within 1e-5, for every head class each family has. The folders are built in
the test from transformers' own classes with random weights (tests/family_models.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bertkit.model.execution import Execution
from bertkit.model.folder import load_model
from family_models import FAMILIES, hf_config, heads, max_diffs, padded_batch, write_folder

transformers = pytest.importorskip("transformers", reason="the parity tests need it (pip install 'bertkit[test]')")

TOL = 1e-5


@pytest.mark.parametrize("family", FAMILIES)
def test_every_head_of_the_family_matches_transformers(family: str, tmp_path: Path) -> None:
    batch = padded_batch(hf_config(family))
    for seed, (ours_name, theirs_name) in enumerate(heads(family).items()):
        theirs = write_folder(family, ours_name, tmp_path / theirs_name, seed=seed)
        ours = load_model(tmp_path / theirs_name)  # the class from config.json's architectures
        assert type(ours).__name__ == ours_name
        assert ours.load_report.complete, str(ours.load_report)
        diffs = max_diffs(ours, theirs, batch)
        layers = [k for k in diffs if k.startswith("hidden_states.")]
        assert len(layers) == 3, diffs  # the embeddings and 2 layers
        assert len(diffs) > len(layers) or (ours_name, ours.pooler) == ("BertModel", None), diffs
        assert max(diffs.values()) <= TOL, (theirs_name, diffs)


@pytest.mark.parametrize("family", ["roberta", "distilbert"])
def test_padded_execution_matches_too(family: str, tmp_path: Path) -> None:
    """The padded path (every position, as transformers computes) agrees as the default unpadded one does."""
    theirs = write_folder(family, "BertModel", tmp_path / "m")
    ours = load_model(tmp_path / "m", execution=Execution(unpadded=False))
    diffs = max_diffs(ours, theirs, padded_batch(hf_config(family)))
    assert max(diffs.values()) <= TOL, diffs


def test_roberta_positions_follow_the_padding(tmp_path: Path) -> None:
    """A sequence embeds the same alone and right- or left-padded in a batch: RoBERTa's positions count the real
    tokens, as transformers' do (left padding shifts BERT's positions, not these)."""
    write_folder("roberta", "BertModel", tmp_path / "m")
    model = load_model(tmp_path / "m")
    ids = torch.tensor([[0, 17, 23, 45, 2]])
    pad = torch.full((1, 3), 1)
    with torch.no_grad():
        alone = model(ids).last_hidden_state[0]
        right = model(torch.cat([ids, pad], 1), torch.tensor([[1] * 5 + [0] * 3])).last_hidden_state[0, :5]
        left = model(torch.cat([pad, ids], 1), torch.tensor([[0] * 3 + [1] * 5])).last_hidden_state[0, 3:]
    assert (alone - right).abs().max() <= TOL and (alone - left).abs().max() <= TOL
    positions = model.embeddings.positions(torch.cat([pad, ids], 1))
    assert positions.tolist() == [[1, 1, 1, 2, 3, 4, 5, 6]]  # pad_token_id 1: pads at 1, real tokens from 2


def test_a_longer_sequence_than_the_positions_is_refused(tmp_path: Path) -> None:
    """RoBERTa's 42 rows with pad id 1 hold 40 tokens (the first two rows are never a real token's)."""
    write_folder("roberta", "BertModel", tmp_path / "m")
    model = load_model(tmp_path / "m")
    assert model.config.max_sequence_length == 40
    model(torch.full((1, 40), 5))
    with pytest.raises(ValueError, match="exceeds the 40 positions"):
        model(torch.full((1, 41), 5))
