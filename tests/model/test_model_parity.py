"""Exact parity with transformers: real MiniLM weights on real sentences, every head after export and import,
one AdamW step, attention probabilities, sentence embeddings against sentence-transformers, model sizes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from bertkit.inference.encoder import Encoder
from bertkit.model import MODEL_CLASSES, BertConfig, BertForPreTraining, BertModel

transformers = pytest.importorskip("transformers", reason="the parity tests need it (pip install 'bertkit[test]')")

TOL = 1e-5
FIGURES: dict[str, float] = {}  # measured figures, printed at the end of the module (pytest -s) for the report


@pytest.fixture(scope="module", autouse=True)
def _print_figures():
    yield
    for name, value in FIGURES.items():
        print(f"\n  {name}: {value:.3g}", end="")


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


# ----------------------------------------------------------------------------------------------------------------
# Real weights, real data.
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_batch(minilm_dir: Path, sentences: dict[str, list]) -> dict[str, torch.Tensor]:
    """32 SST-2 sentences and 16 MRPC pairs, padded to the longest (token ids from transformers' tokenizer)."""
    tok = transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))
    singles = tok(sentences["sst2"], padding=True, return_tensors="pt")
    pairs = tok([a for a, _ in sentences["mrpc"]], [b for _, b in sentences["mrpc"]], padding=True,
                return_tensors="pt")
    seq = max(singles["input_ids"].shape[1], pairs["input_ids"].shape[1])

    def pad(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, seq - t.shape[1]))

    batch = {k: torch.cat([pad(singles[k]), pad(pairs[k])]) for k in ("input_ids", "attention_mask", "token_type_ids")}
    assert batch["attention_mask"].float().mean() < 0.9  # the batch really has padding
    return batch


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> BertModel:
    model = BertModel.from_pretrained(minilm_dir, strict=True)
    assert model.load_report.ignored == ["embeddings.position_ids"]
    return model


@pytest.fixture(scope="module")
def hf_minilm(minilm_dir: Path) -> dict[str, Any]:
    """transformers' BertModel on the same weights, with each attention implementation (loaded once)."""
    return {attn: transformers.BertModel.from_pretrained(str(minilm_dir), attn_implementation=attn).eval()
            for attn in ("sdpa", "eager")}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_real_weights_match_transformers(attn: str, minilm: BertModel, hf_minilm, real_batch) -> None:
    hf = hf_minilm[attn]
    with torch.no_grad():
        ours = minilm(**real_batch, output_hidden_states=True)
        ref = hf(**real_batch, output_hidden_states=True)
    real = real_batch["attention_mask"].bool()
    assert len(ours.hidden_states) == len(ref.hidden_states) == 7
    layer_diffs = [max_diff(a[real], b[real]) for a, b in zip(ours.hidden_states, ref.hidden_states)]
    last = max_diff(ours.last_hidden_state[real], ref.last_hidden_state[real])
    pooled = max_diff(ours.pooler_output, ref.pooler_output)
    FIGURES[f"MiniLM vs HF {attn}: last hidden max|diff|"] = last
    FIGURES[f"MiniLM vs HF {attn}: worst layer max|diff|"] = max(layer_diffs)
    FIGURES[f"MiniLM vs HF {attn}: pooled max|diff|"] = pooled
    assert last <= TOL and max(layer_diffs) <= TOL and pooled <= TOL
    assert torch.all(ours.last_hidden_state[~real] == 0)  # bertkit's documented zeros at padding


def test_attention_probabilities_match_eager(minilm: BertModel, hf_minilm, real_batch) -> None:
    hf = hf_minilm["eager"]
    with torch.no_grad():
        ours = minilm(**real_batch, output_attentions=True).attentions
        ref = hf(**real_batch, output_attentions=True).attentions
    real = real_batch["attention_mask"].bool()  # compare every key for each real query token
    diff = max(max_diff(a.transpose(1, 2)[real], b.transpose(1, 2)[real]) for a, b in zip(ours, ref))
    FIGURES["MiniLM attention probs vs HF eager max|diff|"] = diff
    assert len(ours) == 6 and diff <= TOL


def test_sentence_embeddings_match_sentence_transformers(minilm: BertModel, minilm_dir: Path, minilm_tokenizer,
                                                         sentences) -> None:
    st = pytest.importorskip("sentence_transformers")
    texts = sentences["sst2"] + [a for a, _ in sentences["mrpc"]]
    ref = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, convert_to_tensor=True)
    ours = Encoder(minilm, minilm_tokenizer, precision="fp32", max_length=256).encode(texts, pooling="mean",
                                                                                      normalize=True, batch_size=7)
    cos = torch.nn.functional.cosine_similarity(ours, ref.float(), dim=-1)
    FIGURES["MiniLM embeddings vs sentence-transformers min cosine"] = cos.min().item()
    FIGURES["MiniLM embeddings vs sentence-transformers max|diff|"] = max_diff(ours, ref)
    assert cos.min().item() >= 0.99999
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(texts)), atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# Every head on random tiny and mini configs, both directions.
# ----------------------------------------------------------------------------------------------------------------

BATCH, SEQ, CHOICES = 3, 11, 2


def head_inputs(name: str, config: BertConfig, seed: int) -> dict[str, torch.Tensor]:
    """Inputs (with padding in one row) and labels of each kind for one head class."""
    g = torch.Generator().manual_seed(seed)
    shape = (BATCH, CHOICES, SEQ) if name == "BertForMultipleChoice" else (BATCH, SEQ)
    mask = torch.ones(shape, dtype=torch.long)
    if name != "BertForQuestionAnswering":  # see test_qa_padding_note: QA's loss reads padded logits in transformers
        mask[..., 0, -4:] = 0
    x = {
        "input_ids": torch.randint(5, config.vocab_size, shape, generator=g),
        "attention_mask": mask,
        "token_type_ids": (torch.arange(SEQ) >= SEQ // 2).long().expand(shape).clone(),
    }
    mlm = torch.full((BATCH, SEQ), -100)
    mlm[:, 2] = torch.randint(0, config.vocab_size, (BATCH,), generator=g)
    mlm[1, 5] = 7
    if name in ("BertForPreTraining", "BertForMaskedLM"):
        x["labels"] = mlm
    if name == "BertForPreTraining":
        x["next_sentence_label"] = torch.tensor([0, 1, 0])
    if name in ("BertForNextSentencePrediction", "BertForSequenceClassification"):
        x["labels"] = torch.tensor([1, 0, 1])
    if name == "BertForTokenClassification":
        labels = torch.randint(0, config.num_labels, (BATCH, SEQ), generator=g)
        labels[0, -4:] = -100
        x["labels"] = labels
    if name == "BertForQuestionAnswering":
        x["start_positions"] = torch.tensor([1, 4, 40])  # 40: outside the sequence, ignored by both
        x["end_positions"] = torch.tensor([3, 4, 6])
    if name == "BertForMultipleChoice":
        x["labels"] = torch.tensor([1, 0, 1])
    return x


def compare_head(name: str, ours: torch.nn.Module, hf: torch.nn.Module, x: dict[str, torch.Tensor]) -> float:
    """Largest difference over a head's outputs (at real tokens) and loss; checks the fields match."""
    with torch.no_grad():
        a = ours(**x)
        b = hf(**x)
    real = x["attention_mask"].bool()
    if name == "BertModel":
        return max(max_diff(a.last_hidden_state[real], b.last_hidden_state[real]),
                   max_diff(a.pooler_output, b.pooler_output))
    diffs = [max_diff(a.loss, b.loss)]
    if name == "BertForPreTraining":
        masked = x["labels"] != -100
        diffs += [max_diff(a.prediction_logits, b.prediction_logits[masked]),
                  max_diff(a.seq_relationship_logits, b.seq_relationship_logits)]
        with torch.no_grad():  # and the full logits without labels
            diffs.append(max_diff(ours(x["input_ids"], x["attention_mask"]).prediction_logits[real],
                                  hf(input_ids=x["input_ids"], attention_mask=x["attention_mask"]).prediction_logits[real]))
    elif name == "BertForMaskedLM":
        diffs.append(max_diff(a.logits, b.logits[x["labels"] != -100]))
    elif name == "BertForTokenClassification":
        diffs.append(max_diff(a.logits[real], b.logits[real]))
    elif name == "BertForQuestionAnswering":
        diffs += [max_diff(a.start_logits[real], b.start_logits[real]), max_diff(a.end_logits[real], b.end_logits[real])]
    else:
        diffs.append(max_diff(a.logits, b.logits))
    return max(diffs)


@pytest.fixture(scope="module", params=["tiny", "mini"])
def preset(request) -> BertConfig:
    # A 1,000-token vocabulary keeps 16 save/load round trips fast; every other size is the preset's.
    return BertConfig.preset(request.param, vocab_size=1000, num_labels=3)


# The heads transformers has too (bertkit-only heads, such as the frozen-feature tagger, have nothing to match).
HF_HEADS = [name for name in MODEL_CLASSES if hasattr(transformers, name)]


@pytest.mark.parametrize("name", HF_HEADS)
def test_heads_export_to_transformers(name: str, preset: BertConfig, tmp_path: Path) -> None:
    torch.manual_seed(0)
    ours = MODEL_CLASSES[name](preset).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms, not just the fresh-init zeros and ones
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    ours.save_pretrained(tmp_path)
    hf, info = getattr(transformers, name).from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    diff = compare_head(name, ours, hf.eval(), head_inputs(name, preset, seed=1))
    FIGURES[f"export {name} max|diff|"] = max(FIGURES.get(f"export {name} max|diff|", 0.0), diff)
    assert diff <= TOL


@pytest.mark.parametrize("name", HF_HEADS)
def test_heads_import_from_transformers(name: str, preset: BertConfig, tmp_path: Path) -> None:
    torch.manual_seed(0)
    fields = {k: v for k, v in preset.to_dict().items() if k not in ("label_names", "task_settings")}
    if name == "BertForQuestionAnswering":
        fields["num_labels"] = 2  # transformers sizes qa_outputs from num_labels
    hf_config = transformers.BertConfig(**fields)
    hf = getattr(transformers, name)(hf_config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    hf.save_pretrained(str(tmp_path))
    ours = MODEL_CLASSES[name].from_pretrained(tmp_path, strict=True)
    diff = compare_head(name, ours, hf, head_inputs(name, preset, seed=2))
    FIGURES[f"import {name} max|diff|"] = max(FIGURES.get(f"import {name} max|diff|", 0.0), diff)
    assert diff <= TOL


def test_sequence_classification_losses(tmp_path: Path) -> None:
    """Regression and multi-label losses, as transformers picks them from num_labels and the label dtype."""
    for num_labels, labels in ((1, torch.tensor([0.5, -1.0, 2.0])), (3, torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0]]))):
        config = BertConfig.preset("tiny", vocab_size=1000, num_labels=num_labels)
        ours = MODEL_CLASSES["BertForSequenceClassification"](config).eval()
        ours.save_pretrained(tmp_path / str(num_labels))
        hf = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path / str(num_labels))).eval()
        x = head_inputs("BertForSequenceClassification", config, seed=3)
        x["labels"] = labels
        assert compare_head("BertForSequenceClassification", ours, hf, x) <= TOL


# ----------------------------------------------------------------------------------------------------------------
# One training step.
# ----------------------------------------------------------------------------------------------------------------


def test_adamw_step_matches_transformers(tmp_path: Path) -> None:
    config = BertConfig.preset("tiny", vocab_size=1000, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    ours = BertForPreTraining(config)
    ours.save_pretrained(tmp_path)
    hf = transformers.BertForPreTraining.from_pretrained(str(tmp_path))
    ours.train(), hf.train()
    x = head_inputs("BertForPreTraining", config, seed=4)
    steps = []
    for model in (ours, hf):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
        loss = model(**x).loss
        loss.backward()
        opt.step()
        steps.append(loss.item())
    assert abs(steps[0] - steps[1]) <= TOL
    theirs = dict(hf.named_parameters())
    moved, diff = 0.0, 0.0
    for name, p in ours.named_parameters():
        diff = max(diff, max_diff(p, theirs[name]))
        moved = max(moved, max_diff(p, load_param(tmp_path, name)))
    FIGURES["AdamW step: max|weight diff| vs HF"] = diff
    assert moved > 1e-4  # the step really moved the weights
    assert diff <= TOL


def load_param(folder: Path, name: str) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return f.get_tensor(name)


# ----------------------------------------------------------------------------------------------------------------
# Sizes and configs.
# ----------------------------------------------------------------------------------------------------------------


def test_parameter_counts() -> None:
    with torch.device("meta"):
        base = BertModel(BertConfig.preset("base")).num_parameters()
        large = BertForPreTraining(BertConfig.preset("large")).num_parameters()
    FIGURES["base BertModel parameters (M)"] = base / 1e6
    FIGURES["large BertForPreTraining parameters (M)"] = large / 1e6
    assert abs(base - 110e6) <= 0.01 * 110e6
    assert 335e6 <= large <= 340e6
    hf = transformers.BertModel(transformers.BertConfig(num_hidden_layers=1))
    ours = BertModel(BertConfig(num_hidden_layers=1))
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters())


def test_config_json_round_trip(tmp_path: Path) -> None:
    config = BertConfig.preset("mini", num_labels=3, label_names=["neg", "neu", "pos"], task="classification",
                               task_settings={"max_length": 128})
    config.save(tmp_path / "config.json")
    assert BertConfig.load(tmp_path / "config.json") == config
    assert BertConfig.from_dict(config.to_dict()) == config
    hf = transformers.BertConfig.from_pretrained(str(tmp_path))
    assert hf.id2label == {0: "neg", 1: "neu", 2: "pos"} and hf.hidden_size == 256


def test_reads_hf_config_json(minilm_dir: Path) -> None:
    config = BertConfig.load(minilm_dir / "config.json")
    raw = json.loads((minilm_dir / "config.json").read_text())
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                "layer_norm_eps", "max_position_embeddings"):
        assert getattr(config, key) == raw[key]
    hf_saved = transformers.BertConfig(hidden_act="gelu_new", num_labels=4).to_dict()
    ours = BertConfig.from_dict(hf_saved)
    assert ours.hidden_act == "gelu_tanh" and ours.num_labels == 4


def test_qa_padding_note(tmp_path: Path) -> None:
    """QA logits match transformers at real tokens with padding too (its loss then also reads padded logits)."""
    config = BertConfig.preset("tiny", vocab_size=1000)
    ours = MODEL_CLASSES["BertForQuestionAnswering"](config).eval()
    ours.save_pretrained(tmp_path)
    hf = transformers.BertForQuestionAnswering.from_pretrained(str(tmp_path)).eval()
    x = head_inputs("BertForQuestionAnswering", config, seed=5)
    x["attention_mask"][0, -4:] = 0
    del x["start_positions"], x["end_positions"]
    with torch.no_grad():
        a, b = ours(**x), hf(**x)
    real = x["attention_mask"].bool()
    assert max_diff(a.start_logits[real], b.start_logits[real]) <= TOL
    assert max_diff(a.end_logits[real], b.end_logits[real]) <= TOL
