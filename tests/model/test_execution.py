"""The execution plan's levers (`bertkit.model.execution.Execution`): sparse MLM (the masked positions as they come,
or in fixed slots), the sparse last layer, unpadded linear layers with attention grouped by length. Each against the
plain path (every position, dense MLM logits, as transformers computes): the same loss within 1e-5 relative and the
same gradients within 1e-5 of each parameter's largest gradient, in float32; the weights' names and config.json do
not change. Under bf16 (autocast on float32 weights, or a bf16 working copy of the weights), each lever against the
float32 plain path within bf16's rounding. A plan is given at construction or to one forward call, never set on a
built model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from bertkit.errors import ConfigError
from bertkit.model import BertConfig, BertForMaskedLM, BertForPreTraining
from bertkit.model.bert import BertSelfAttention
from bertkit.model.execution import PLAIN, Execution
from bertkit.model.heads import labelled_logits
from bertkit.model.kernels import Packing
from bertkit.training.precision import Bf16Weights

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-5  # of each parameter's largest gradient entry

LEVERS = {
    "sparse MLM": Execution(unpadded=False),
    "unpadded, grouped attention": dataclasses.replace(PLAIN, unpadded=True),
    "all (the default)": Execution(),
    "sparse MLM, the last layer everywhere": Execution(unpadded=False, sparse_last_layer=False),
    "all, the last layer everywhere": Execution(sparse_last_layer=False),
    "sparse MLM in fixed slots": Execution(unpadded=False, mlm_slots=24),
    "all, fixed slots": Execution(mlm_slots=24),
}


def padded_batch(vocab: int, batch: int = 12, width: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    """Lengths 6..64 (spread enough that the CPU groups attention by length), 15% of real tokens labelled."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.cat([torch.tensor([width, 6]), torch.randint(6, width + 1, (batch - 2,), generator=g)])
    real = torch.arange(width)[None, :] < lengths[:, None]
    ids = torch.where(real, torch.randint(5, vocab, (batch, width), generator=g), 0)
    chosen = (torch.rand(batch, width, generator=g) < 0.15) & real
    chosen[:, 1] = True  # at least one per row
    return dict(input_ids=torch.where(chosen, 4, ids), attention_mask=real.long(),
                token_type_ids=((torch.arange(width)[None, :] >= lengths[:, None] // 2) & real).long(),
                labels=torch.where(chosen, ids, -100), next_sentence_label=torch.randint(0, 2, (batch,), generator=g))


def loss_and_grads(model: torch.nn.Module, batch: dict[str, torch.Tensor],
                   plan: Execution | None = None) -> tuple[float, dict]:
    """The loss and every parameter's gradient of one forward and backward under `plan` (None: the model's own)."""
    model.zero_grad(set_to_none=True)
    loss = model(**batch, execution=plan).loss
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(got: tuple[float, dict], want: tuple[float, dict], what: str) -> None:
    assert got[0] == pytest.approx(want[0], rel=LOSS_RTOL), what
    assert got[1].keys() == want[1].keys(), what
    for name, g in want[1].items():
        scale = float(g.abs().max())
        # + an absolute floor for the key biases, whose true gradient is zero (softmax ignores a shift shared by
        # every key), so what float32 leaves of it (about 1e-12) is rounding noise, not a scale to compare against
        assert float((got[1][name] - g).abs().max()) <= GRAD_RTOL * scale + 1e-10, f"{what}: {name}"


@pytest.mark.parametrize("lever", list(LEVERS))
def test_every_lever_gives_the_plain_loss_and_gradients(lever: str) -> None:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY)).train()  # dropout 0: train mode, deterministic
    batch = padded_batch(99)
    plain = loss_and_grads(model, batch, PLAIN)
    assert Packing(batch["attention_mask"]).groups  # the batch takes the path named: length groups on a CPU
    assert_same(loss_and_grads(model, batch, LEVERS[lever]), plain, lever)


@pytest.mark.parametrize("unpadded", [True, False])
def test_each_execution_runs_its_own_attention(unpadded: bool, monkeypatch) -> None:
    """The levers give the same numbers, so only a spy on BertSelfAttention tells which attention ran: unpadded on a
    CPU attends group by group (lengths rounded up to 16 together, each group at its own longest length); with
    unpadded off, once over the full width."""
    calls: list[tuple[int, ...]] = []
    attend = BertSelfAttention.attend

    def spy_attend(self, qkv, key_mask, output_attentions=False):  # noqa: ANN001, ANN202
        calls.append(tuple(qkv.shape[:2]))  # (sequences, width)
        return attend(self, qkv, key_mask, output_attentions)

    monkeypatch.setattr(BertSelfAttention, "attend", spy_attend)
    torch.manual_seed(8)
    model = BertForPreTraining(BertConfig(**TINY), Execution(unpadded=unpadded)).eval()
    batch = padded_batch(99, seed=8)
    with torch.no_grad():
        model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    lengths = batch["attention_mask"].sum(1)
    if unpadded:
        rounded = (lengths + 15) // 16 * 16
        per_layer = [(int((rounded == r).sum()), int(lengths[rounded == r].max()))
                     for r in sorted(set(rounded.tolist()))]
        assert len(per_layer) > 1 and sum(n * w for n, w in per_layer) < 0.8 * 12 * 64  # it pays here
    else:
        per_layer = [(12, 64)]
    assert calls == per_layer * 2  # each of the 2 layers


BF16_LOSS_RTOL = 1e-3  # bf16 keeps 8 bits of mantissa; the losses stay float32 under autocast
# of each parameter's gradient norm (measured on this batch: at most 0.009 under autocast, 0.020 with bf16 weights,
# whose activations, LayerNorms and residual stream are bf16 too)
BF16_GRAD_RTOL = 0.03


@pytest.mark.parametrize("weights", ["float32 (autocast)", "bf16 (master copy)"])
@pytest.mark.parametrize("lever", list(LEVERS))
def test_every_lever_under_bf16_tracks_float32(lever: str, weights: str) -> None:
    """`precision: bf16` on a CPU (or GPU) runs the levers under autocast, on the float32 weights or, with
    `bf16_weights`, on their bf16 working copy: each gives the float32 plain path's loss within 1e-3 and each
    gradient within 3% of its norm, and the gradients the optimizer reads (the master copy's) are float32."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY)).train()
    batch = padded_batch(99)
    want_loss, want = loss_and_grads(model, batch, PLAIN)
    if weights.startswith("float32"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, got = loss_and_grads(model, batch, LEVERS[lever])
    else:
        copy = Bf16Weights(model)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, working = loss_and_grads(copy.working, batch, LEVERS[lever])
        assert all(g.dtype == torch.bfloat16 for g in working.values())
        model.zero_grad(set_to_none=True)
        copy.take_gradients()
        got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert loss == pytest.approx(want_loss, rel=BF16_LOSS_RTOL)
    assert got.keys() == want.keys()
    assert any(not torch.equal(got[name], g) for name, g in want.items())  # bf16 did run
    for name, g in want.items():
        assert got[name].dtype == torch.float32, name
        if float(g.norm()) > 1e-6:  # not the key biases, whose true gradient is zero
            assert float((got[name] - g).norm()) <= BF16_GRAD_RTOL * float(g.norm()), f"{lever}: {name}"


def test_levers_on_the_bertkit_mini_architecture() -> None:
    """Pre-LN and ALiBi (bertkit-mini's), masked LM alone: sparse + unpadded against the plain path."""
    torch.manual_seed(1)
    model = BertForMaskedLM(BertConfig(**TINY, layer_norm_position="pre", alibi=True)).train()
    batch = {k: v for k, v in padded_batch(99, seed=1).items() if k != "next_sentence_label"}
    plain = loss_and_grads(model, batch, PLAIN)
    assert_same(loss_and_grads(model, batch, Execution()), plain, "mini arch")


def test_a_plan_is_checked_frozen_and_the_models_own_unless_a_call_gives_another() -> None:
    """Execution checks its values like a config field; it cannot be changed once made; a model computes with the
    plan it was built with, and a forward given another uses that one for the call only."""
    with pytest.raises(ConfigError, match=r"Execution.mlm_slots: expected an integer >= 0 and <= 65535, found -1"):
        Execution(mlm_slots=-1)
    with pytest.raises(ConfigError, match="Execution.mlm_slots = 20: expected 0, or a count > 0 with sparse_mlm"):
        Execution(sparse_mlm=False, mlm_slots=20)
    with pytest.raises(ConfigError, match="Execution.unpadded: expected true or false, found 1"):
        Execution(unpadded=1)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Execution().unpadded = False  # type: ignore[misc]
    torch.manual_seed(2)
    model = BertForMaskedLM(BertConfig(**TINY), PLAIN).eval()
    assert model.execution == PLAIN and model.bert.execution == PLAIN
    batch = {k: v for k, v in padded_batch(99, seed=2).items() if k != "next_sentence_label"}
    with torch.no_grad():
        assert model(**batch).logits.dim() == 3 and model(**batch).mlm_positions is None
        assert model(**batch, execution=Execution()).mlm_positions is not None
    assert model.execution == PLAIN  # the call's plan did not stay
    assert BertForPreTraining(BertConfig(**TINY)).execution == Execution()  # the default: every lever on


def test_dense_logits_cover_every_position_and_the_folder_is_unchanged(tmp_path: Path) -> None:
    """Sparse logits are rows at `mlm_positions`, each (sequence, position), the masked ones in row-major order;
    dense ones are (batch, seq, vocab) with no positions, and equal to them there; `labelled_logits` reads both
    alike. The weights and the folder written do not depend on the plan."""
    torch.manual_seed(2)
    model = BertForPreTraining(BertConfig(**TINY)).eval()
    batch = padded_batch(99, seed=2)
    model.save_pretrained(str(tmp_path / "before"))
    keys = list(model.state_dict())
    with torch.no_grad():
        sparse = model(**batch)
        dense = model(**batch, execution=PLAIN)
    assert dense.prediction_logits.shape == (*batch["input_ids"].shape, 99) and dense.mlm_positions is None
    masked = batch["labels"] != -100
    assert torch.equal(sparse.mlm_positions, masked.nonzero())
    torch.testing.assert_close(dense.prediction_logits[masked], sparse.prediction_logits, rtol=1e-5, atol=1e-5)
    for out in (sparse, dense):
        logits, labels = labelled_logits(out.prediction_logits, out.mlm_positions, batch["labels"])
        assert torch.equal(labels, batch["labels"][masked])
        torch.testing.assert_close(logits, sparse.prediction_logits, rtol=1e-5, atol=1e-5)
    assert list(model.state_dict()) == keys
    model.save_pretrained(str(tmp_path / "after"))
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "before" / name).read_bytes() == (tmp_path / "after" / name).read_bytes(), name
    assert "sparse_mlm" not in json.loads((tmp_path / "after" / "config.json").read_text())


def test_fixed_slots_keep_static_shapes_in_training_and_the_masked_positions_in_evaluation() -> None:
    """mlm_slots: a training step's MLM logits are a (batch * slots, vocab) block whatever the batch's number of
    masked tokens, at positions each sequence's masked ones first; in eval mode the masked positions as they come;
    too few slots for a sequence's masked tokens is an error, not a silently smaller loss."""
    torch.manual_seed(3)
    batch = padded_batch(99, seed=3)
    masked = batch["labels"] != -100
    most = int(masked.sum(1).max())
    model = BertForPreTraining(BertConfig(**TINY), Execution(mlm_slots=most))
    for seed in (3, 4):  # two batches with different numbers of masked tokens, the same shape
        b = padded_batch(99, seed=seed)
        b["labels"][:, most + 1 :] = -100  # at most `most` per row
        out = model.train()(**b)
        assert out.prediction_logits.shape == (12 * most, 99) and out.mlm_positions.shape == (12 * most, 2)
        first = out.mlm_positions.view(12, most, 2)
        for row, n in enumerate((b["labels"] != -100).sum(1).tolist()):  # its masked positions first, in order
            assert first[row, :n, 1].tolist() == (b["labels"][row] != -100).nonzero().squeeze(1).tolist()
            assert bool((first[row, :, 0] == row).all())
    with torch.no_grad():
        assert model.eval()(**batch).prediction_logits.shape == (int(masked.sum()), 99)
    with pytest.raises(RuntimeError, match="more masked positions than mlm_slots"):
        model.train()(**batch, execution=Execution(mlm_slots=most - 1))


def test_fixed_slots_make_the_training_step_one_graph() -> None:
    """What mlm_slots is for: with unpadded off, the training forward traces into one graph with no break (so
    torch.compile can capture it whole, CUDA graphs included); the masked positions as they come break it."""
    import torch._dynamo as dynamo

    torch.manual_seed(5)
    batch = padded_batch(99, seed=5)
    model = BertForPreTraining(BertConfig(**TINY), Execution(unpadded=False, mlm_slots=24)).train()
    fixed = dynamo.explain(model)(**batch)
    assert (fixed.graph_count, fixed.graph_break_count) == (1, 0), fixed.break_reasons
    as_they_come = BertForPreTraining(BertConfig(**TINY), Execution(unpadded=False)).train()
    assert dynamo.explain(as_they_come)(**batch).graph_break_count > 0


def test_the_last_layer_runs_only_where_the_heads_read() -> None:
    """sparse_last_layer: in a step with labels the last layer's feed-forward block sees the masked positions and
    [CLS] only (batch x the most in a sequence), the layer below every real token; BertModel's output_at gives the
    full computation's values at its places and zeros elsewhere."""
    torch.manual_seed(6)
    model = BertForPreTraining(BertConfig(**TINY)).train()
    batch = padded_batch(99, seed=6)
    rows: list[int] = []
    for layer in model.bert.encoder.layer:
        layer.intermediate.dense.register_forward_hook(lambda m, args, out: rows.append(args[0].reshape(-1, 32).shape[0]))
    read = (batch["labels"] != -100) | (torch.arange(64) == 0)
    model(**batch)
    assert rows == [int(batch["attention_mask"].sum()), 12 * int(read.sum(1).max())]
    rows.clear()
    model(**batch, execution=Execution(sparse_last_layer=False))
    assert rows == [int(batch["attention_mask"].sum())] * 2

    model.eval()
    places = torch.stack([torch.randperm(64)[:5] for _ in range(12)])
    with torch.no_grad():
        full = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        some = model.bert(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                          output_at=places).last_hidden_state
    at = torch.zeros(12, 64, dtype=torch.bool).scatter(1, places, True)
    torch.testing.assert_close(some[at], full[at], rtol=1e-5, atol=1e-5)  # zero at the padded places, as full is
    assert bool((some[~at] == 0).all())
    with pytest.raises(ValueError, match="hidden states and attentions need every position"):
        model.bert(batch["input_ids"], batch["attention_mask"], output_hidden_states=True, output_at=places)


@pytest.mark.parametrize("variant", ["shared layers", "mean pooling", "activation checkpointing", "pre-LN, ALiBi"])
def test_the_sparse_last_layer_on_every_architecture(variant: str) -> None:
    """The sparse last layer against every position of it (and the plain path) under ALBERT's shared layers, mean
    pooling (the pooler reads every token, so the last layer stays whole), recomputed layers, and bertkit-mini's
    pre-LN + ALiBi blocks with NSP."""
    torch.manual_seed(7)
    extra = {"shared layers": dict(share_layers=True), "mean pooling": dict(pooling="mean"),
             "pre-LN, ALiBi": dict(layer_norm_position="pre", alibi=True)}.get(variant, {})
    model = BertForPreTraining(BertConfig(**TINY, **extra)).train()
    model.set_activation_checkpointing(variant == "activation checkpointing")
    batch = padded_batch(99, seed=7)
    plain = loss_and_grads(model, batch, PLAIN)
    for unpadded in (False, True):
        assert_same(loss_and_grads(model, batch, Execution(unpadded=unpadded)), plain,
                    f"{variant}, unpadded {unpadded}")
