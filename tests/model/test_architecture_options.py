"""bertkit-only architecture options against hand-written references, and their export rules: pre-LN blocks
(config.layer_norm_position = 'pre') and ALiBi attention biases (config.alibi)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertkit.errors import ConfigError
from bertkit.model import BertConfig, BertForPreTraining, BertModel

PRE = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_position="pre")


def reference_pre_ln(model: BertModel, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Xiong et al. 2020's pre-LN Transformer written out from the parameters, padded, no packing; with
    config.alibi, Press et al. 2022's biases -m_h |i - j|, m_h = 2**(-8h/A)."""
    c = model.config
    p = dict(model.named_parameters())
    eps = c.layer_norm_eps

    def ln(x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (c.hidden_size,), p[f"{name}.weight"], p[f"{name}.bias"], eps)

    def lin(x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]

    b, s = ids.shape
    x = (p["embeddings.word_embeddings.weight"][ids] + p["embeddings.token_type_embeddings.weight"][0]
         + p["embeddings.position_embeddings.weight"][:s])
    x = ln(x, "embeddings.LayerNorm")
    heads, d = c.num_attention_heads, c.hidden_size // c.num_attention_heads
    for i in range(c.num_hidden_layers):
        pre = f"encoder.layer.{i}."
        h = ln(x, pre + "attention.output.LayerNorm")  # normalise the sub-layer's input
        q, k, v = (lin(h, pre + f"attention.self.{n}").view(b, s, heads, d).transpose(1, 2)
                   for n in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if c.alibi:
            slopes = torch.tensor([2 ** (-8 * h / heads) for h in range(1, heads + 1)])
            distance = torch.tensor([[abs(i - j) for j in range(s)] for i in range(s)], dtype=torch.float32)
            scores = scores - slopes[:, None, None] * distance
        scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)
        x = x + lin(context, pre + "attention.output.dense")  # residual stream stays unnormalised
        h = ln(x, pre + "output.LayerNorm")
        x = x + lin(F.gelu(lin(h, pre + "intermediate.dense")), pre + "output.dense")
    return ln(x, "encoder.LayerNorm")


@pytest.mark.parametrize("alibi", [False, True])
def test_pre_ln_forward_and_backward_match_reference(alibi: bool) -> None:
    torch.manual_seed(0)
    model = BertModel(BertConfig(**PRE, alibi=alibi))
    with torch.no_grad():  # non-trivial LayerNorm parameters, so a misplaced norm cannot hide
        for name, t in model.named_parameters():
            if "LayerNorm" in name:
                t.add_(torch.randn_like(t) * 0.3)
    ids = torch.randint(5, 99, (3, 40))
    mask = torch.ones_like(ids)
    mask[1, 27:] = 0
    mask[2, 3:] = 0
    ours = model(ids, mask).last_hidden_state
    ref = reference_pre_ln(model, ids, mask)
    real = mask.bool()
    assert torch.allclose(ours[real], ref[real], atol=1e-5)
    # gradients of every parameter through a loss at the real tokens
    weights = torch.randn_like(ref)
    g_ours = torch.autograd.grad((ours[real] * weights[real]).sum(), list(model.parameters()), allow_unused=True)
    g_ref = torch.autograd.grad((ref[real] * weights[real]).sum(), list(model.parameters()), allow_unused=True)
    for (name, _), a, b in zip(model.named_parameters(), g_ours, g_ref):
        if name.startswith("pooler"):
            continue
        assert a is not None and b is not None, name
        # float32 sums over the tokens, in another order: within a few ulps of the gradient's largest entry
        assert torch.allclose(a, b, atol=1e-5 + 1e-6 * b.abs().max().item()), name


def test_pre_ln_differs_from_post_ln_and_has_a_final_norm() -> None:
    torch.manual_seed(0)
    pre = BertModel(BertConfig(**PRE))
    post = BertModel(BertConfig(**{**PRE, "layer_norm_position": "post"}))
    with torch.no_grad():  # sub-layers large enough for where the norm sits to matter
        for t in pre.parameters():
            t.add_(torch.randn_like(t) * 0.3)
    assert "encoder.LayerNorm.weight" in dict(pre.named_parameters())
    assert "encoder.LayerNorm.weight" not in dict(post.named_parameters())
    post.load_state_dict({k: v for k, v in pre.state_dict().items() if not k.startswith("encoder.LayerNorm")})
    ids = torch.randint(5, 99, (2, 9))
    assert not torch.allclose(pre(ids).last_hidden_state, post(ids).last_hidden_state, atol=1e-3)
    # hidden_states ends with last_hidden_state (after the final norm)
    out = pre(ids, output_hidden_states=True)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    with pytest.raises(ConfigError, match="layer_norm_position"):
        BertConfig(**{**PRE, "layer_norm_position": "sandwich"})


def test_pre_ln_folder_round_trips_and_is_not_marked_as_bert(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**PRE))
    model.save_pretrained(str(tmp_path / "m"))
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["model_type"] == "bertkit"  # transformers must not take it for a post-LN BERT
    back = BertForPreTraining.from_pretrained(str(tmp_path / "m"), strict=True)
    assert back.config.layer_norm_position == "pre"
    ids = torch.randint(5, 99, (2, 9))
    model.eval(), back.eval()
    assert torch.equal(model(ids).prediction_logits, back(ids).prediction_logits)


def test_convert_to_hf_refuses_pre_ln(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bertkit.cli import main

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**PRE))
    model.save_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    assert main(["convert", "--to-hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 1
    assert "pre-LN" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


def test_alibi_makes_attention_local_and_every_path_agrees() -> None:
    """At initialisation an ALiBi head already prefers near keys; grouped, padded and written-out paths agree."""
    from bertkit.model.kernels import Packing

    config = BertConfig(**{**PRE, "layer_norm_position": "post", "alibi": True})
    torch.manual_seed(0)
    model = BertModel(config).eval()
    lengths = [3, 70, 71, 100, 128, 20, 64, 127, 1]
    ids = torch.randint(5, 99, (len(lengths), 128))
    mask = (torch.arange(128)[None, :] < torch.tensor(lengths)[:, None]).long()
    assert Packing(mask).groups is not None
    with torch.no_grad():
        grouped = model(ids * mask, mask).last_hidden_state
        written = model(ids * mask, mask, output_attentions=True)
    assert torch.allclose(grouped, written.last_hidden_state, atol=1e-5)
    probs = written.attentions[0][4, 0]  # sequence of length 128, the steepest head: (queries, keys)
    assert probs[64, 63] > 5 * probs[64, 0]  # the neighbour outweighs a key 64 positions away
    assert torch.all(written.attentions[0][0, :, :, 3:] == 0)  # padded keys get nothing
    assert not BertConfig(alibi=True).bert_compatible and BertConfig().bert_compatible


def test_bertkit_only_folders_leave_out_the_tied_copies(tmp_path: Path) -> None:
    """transformers needs the decoder copy of the word embeddings; a pre-LN or ALiBi folder, which it cannot load
    anyway, is written without it and loads back tied and equal."""
    from safetensors import safe_open

    torch.manual_seed(0)
    for options, expect_copy in (({"layer_norm_position": "post"}, True), ({"alibi": True}, False)):
        model = BertForPreTraining(BertConfig(**{**PRE, **options})).eval()
        folder = tmp_path / str(expect_copy)
        model.save_pretrained(str(folder))
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            keys = set(f.keys())
        assert ("cls.predictions.decoder.weight" in keys) == expect_copy
        back = BertForPreTraining.from_pretrained(str(folder), strict=True).eval()
        assert back.cls.predictions.decoder.weight is back.bert.embeddings.word_embeddings.weight
        ids = torch.randint(5, 99, (2, 9))
        assert torch.equal(model(ids).prediction_logits, back(ids).prediction_logits)


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    """Recomputing each layer in the backward pass changes memory, never the numbers (dropout 0, padded batch)."""
    torch.manual_seed(0)
    config = BertConfig(**{**PRE, "layer_norm_position": "post"})
    model = BertForPreTraining(config)
    ids = torch.randint(5, 99, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, 8:] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 3] = 7

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(ids, mask, labels=labels, next_sentence_label=torch.tensor([0, 1, 0])).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.set_activation_checkpointing(True)
    assert model.bert.encoder.gradient_checkpointing
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys() and len(plain) > 20
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=1e-6, msg=name)


def test_mean_pooling_reads_the_mean_of_the_real_tokens(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """config.pooling = 'mean': the pooler reads the real tokens' mean (padding ignored) instead of [CLS]."""
    from bertkit.cli import main
    from bertkit.model import BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(**{**PRE, "layer_norm_position": "post", "pooling": "mean"})
    model = BertModel(config).eval()
    ids = torch.randint(5, 99, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    out = model(ids, mask)
    p = dict(model.named_parameters())
    for row, n in ((0, 9), (1, 6)):
        mean = out.last_hidden_state[row, :n].mean(0)
        expected = torch.tanh(mean @ p["pooler.dense.weight"].T + p["pooler.dense.bias"])
        torch.testing.assert_close(out.pooler_output[row], expected, rtol=0, atol=1e-6)
    # the same sentence with and without padding gives the same pooled vector
    torch.testing.assert_close(model(ids[1:, :6]).pooler_output[0], out.pooler_output[1], rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="pooling"):
        BertConfig(**{**PRE, "pooling": "max"})
    # a bertkit-only option: written as model_type 'bertkit', refused by convert --to-hf, read back by bertkit
    head = BertForSequenceClassification(config)
    head.save_pretrained(str(tmp_path / "m"))
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model_type"] == "bertkit"
    assert BertForSequenceClassification.from_pretrained(tmp_path / "m").config.pooling == "mean"
    (tmp_path / "m" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    assert main(["convert", "--to-hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 1
    assert "mean pooling" in capsys.readouterr().err


ALBERT = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_albert_options_cut_the_parameters_by_the_formula() -> None:
    """Factorised embedding: V x E + E x H (+ H) instead of V x H for the vocabulary (positions and segments too);
    cross-layer sharing: one layer's parameters instead of L."""
    from bertkit.model.bert import BertLayer

    bert = BertModel(BertConfig(**ALBERT))
    albert = BertModel(BertConfig(**ALBERT, embedding_size=8, share_layers=True))
    V, P, T, H, E, L = 99, 512, 2, 32, 8, 3
    layer = sum(p.numel() for p in BertLayer(BertConfig(**ALBERT)).parameters())
    expected = (bert.num_parameters() - (V + P + T) * (H - E) - 2 * (H - E)  # narrower tables and LayerNorm
                + E * H + H  # the E -> H projection
                - (L - 1) * layer)  # one shared layer
    assert albert.num_parameters() == expected
    assert BertModel(BertConfig(**ALBERT, share_layers=True)).num_parameters() == bert.num_parameters() - (L - 1) * layer


def test_albert_forward_is_the_shared_layer_applied_l_times_and_round_trips(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    from bertkit.cli import main

    torch.manual_seed(0)
    config = BertConfig(**ALBERT, embedding_size=8, share_layers=True)
    model = BertForPreTraining(config).eval()
    assert len(model.bert.encoder.layer) == 1
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight  # tied, (V, E)
    ids = torch.randint(5, 99, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    out = model(ids, mask, output_hidden_states=True)
    from bertkit.model.kernels import Packing

    packing = Packing(mask)
    x = packing.pack(model.bert.embeddings(ids, torch.zeros_like(ids)))
    for _ in range(3):
        x, _ = model.bert.encoder.layer[0](x, packing)
    torch.testing.assert_close(packing.unpack(x), out.hidden_states[-1], rtol=0, atol=1e-6)
    assert out.prediction_logits.shape == (2, 7, 99)
    # the shared layer's gradient is the sum over its three applications: it trains
    labels = torch.full_like(ids, -100)
    labels[:, 2] = 9
    model.train()
    model(ids, mask, labels=labels, next_sentence_label=torch.tensor([0, 1])).loss.backward()
    assert model.bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.bert.embeddings.projection.weight.grad.abs().sum() > 0
    model.eval()
    model.save_pretrained(str(tmp_path / "m"))
    back = BertForPreTraining.from_pretrained(tmp_path / "m", strict=True).eval()
    assert back.config.embedding_size == 8 and back.config.share_layers
    assert torch.equal(back(ids, mask).prediction_logits, model(ids, mask).prediction_logits)
    (tmp_path / "m" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(99)))
    assert main(["convert", "--to-hf", str(tmp_path / "m"), "--out", str(tmp_path / "hf")]) == 1
    assert "factorised embedding" in capsys.readouterr().err
