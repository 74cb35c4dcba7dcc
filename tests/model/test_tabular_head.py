"""The sequence classifier with non-text inputs: [pooled [CLS]; numeric; category embeddings] -> one linear layer."""

from __future__ import annotations

import pytest
import torch

from bertkit.model import BertConfig
from bertkit.model.heads import BertForSequenceClassification

TABULAR = {"numeric": 4, "categories": [3, 5], "embedding_size": 6}


def tiny(**overrides: object) -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, num_labels=2, **overrides)
    return BertForSequenceClassification(config).eval()


def inputs() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.tensor([[2, 7, 9, 3], [2, 11, 3, 0]]),
            "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
            "numeric_features": torch.tensor([[0.5, -1.0, 0.0, 1.0], [2.0, 0.0, 1.0, 0.0]]),
            "categorical_ids": torch.tensor([[0, 4], [2, 1]])}


def test_logits_are_the_classifier_on_the_concatenation() -> None:
    model = tiny(tabular_inputs=TABULAR)
    assert model.classifier.in_features == 32 + 4 + 2 * 6
    x = inputs()
    with torch.no_grad():
        logits = model(**x).logits
        pooled = model.bert(x["input_ids"], x["attention_mask"]).pooler_output  # (2, 32)
        emb = model.tabular.embeddings
        joined = torch.cat([pooled, x["numeric_features"], emb[0].weight[x["categorical_ids"][:, 0]],
                            emb[1].weight[x["categorical_ids"][:, 1]]], -1)  # (2, 48)
        by_hand = joined @ model.classifier.weight.T + model.classifier.bias
    torch.testing.assert_close(logits, by_hand)


def test_the_output_depends_on_the_numbers_and_the_categories() -> None:
    model = tiny(tabular_inputs=TABULAR)
    x = inputs()
    with torch.no_grad():
        base = model(**x).logits
        numbers = model(**{**x, "numeric_features": x["numeric_features"] + 1.0}).logits
        categories = model(**{**x, "categorical_ids": torch.tensor([[1, 4], [2, 1]])}).logits
    assert not torch.allclose(base[0], numbers[0]) and not torch.allclose(base[1], numbers[1])
    assert not torch.allclose(base[0], categories[0]) and torch.equal(base[1], categories[1])  # only row 0 changed


def test_a_missing_tabular_input_is_a_named_error() -> None:
    model = tiny(tabular_inputs=TABULAR)
    x = inputs()
    del x["categorical_ids"]
    with pytest.raises(ValueError, match="categorical_ids"):
        model(**x)


def test_tabular_weights_round_trip_and_the_folder_is_marked_bertkit(tmp_path) -> None:
    model = tiny(tabular_inputs=TABULAR)
    model.save_pretrained(str(tmp_path))
    again = BertForSequenceClassification.from_pretrained(str(tmp_path)).eval()
    assert again.config.tabular_inputs == TABULAR and not again.config.bert_compatible
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs()).logits, model(**inputs()).logits)


def test_without_tabular_inputs_the_head_is_the_papers() -> None:
    model = tiny()
    assert model.tabular is None and model.classifier.in_features == 32 and model.config.bert_compatible


def test_convert_to_hf_refuses_a_tabular_folder_naming_the_option(tmp_path, capsys) -> None:
    from bertkit.cli import main

    tiny(tabular_inputs=TABULAR).save_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    assert main(["convert", "--to-hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 1
    assert "non-text columns beside the text (tabular_inputs)" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()
