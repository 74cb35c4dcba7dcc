"""The BERT family's folders as transformers writes them, built without the network from a small random config:
what the family tests (tests/model, the workflow tests) and benchmarks/bench_family_parity.py share.

Each family is built from transformers' own classes (`transformers.RobertaForMaskedLM(config)`, ...) and written by
its `save_pretrained`, so the folder is exactly what a published checkpoint of that family holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# google-research/bert modeling_test.py's tiny sizes, in BERT's key names (DistilBERT renames them).
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
FAMILIES = ("distilbert", "roberta", "xlm-roberta", "albert", "electra")
STEMS = {"distilbert": "DistilBert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "albert": "Albert",
         "electra": "Electra"}
# bertkit's head class -> transformers' class suffix, for the heads every family has.
HEADS = {"BertModel": "Model", "BertForMaskedLM": "ForMaskedLM",
         "BertForSequenceClassification": "ForSequenceClassification",
         "BertForTokenClassification": "ForTokenClassification", "BertForQuestionAnswering": "ForQuestionAnswering",
         "BertForMultipleChoice": "ForMultipleChoice"}
EXTRA_HEADS = {"albert": {"BertForPreTraining": "ForPreTraining"},
               "electra": {"BertForReplacedTokenDetection": "ForPreTraining"}}
# Output fields compared: transformers' name -> bertkit's.
LOGITS = {"logits": "logits", "start_logits": "start_logits", "end_logits": "end_logits",
          "prediction_logits": "prediction_logits", "sop_logits": "seq_relationship_logits",
          "pooler_output": "pooler_output"}


def heads(family: str) -> dict[str, str]:
    """bertkit class -> transformers' class name, for every head of `family`."""
    return {ours: STEMS[family] + suffix for ours, suffix in {**HEADS, **EXTRA_HEADS.get(family, {})}.items()}


def hf_config(family: str, **overrides: Any) -> Any:
    """A small transformers config of `family`: the tiny sizes, 40 positions, and the settings that make the family
    what it is (RoBERTa's pad id 1 and one segment, ALBERT's shared layer and 16-wide embedding and tanh GELU,
    ELECTRA's 16-wide embedding)."""
    import transformers

    sizes = {**TINY, "max_position_embeddings": 40}
    if family == "distilbert":
        kwargs = dict(vocab_size=sizes["vocab_size"], dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                      max_position_embeddings=40)
    elif family in ("roberta", "xlm-roberta"):
        kwargs = dict(sizes, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5,
                      max_position_embeddings=42)
    elif family == "albert":
        kwargs = dict(sizes, embedding_size=16, hidden_act="gelu_new")
    else:
        kwargs = dict(sizes, embedding_size=16)
    cls = getattr(transformers, STEMS[family] + "Config")
    return cls(**{**kwargs, **overrides})


def pad_id(config: Any) -> int:
    return config.pad_token_id if config.pad_token_id is not None else 0


def write_folder(family: str, head: str, folder: Path, seed: int = 0, **overrides: Any) -> Any:
    """transformers' `head` model of `family` (a bertkit class name or transformers' suffix) with random weights
    from `seed`, written to `folder` by its save_pretrained; returns the model (eval mode)."""
    import transformers

    config = hf_config(family, **overrides)
    torch.manual_seed(seed)
    model = getattr(transformers, heads(family).get(head, STEMS[family] + head))(config).eval()
    model.save_pretrained(folder)
    return model


def padded_batch(config: Any, seed: int = 0) -> dict[str, torch.Tensor]:
    """Four sequences of 12, 9, 5 and 12 tokens, right-padded with the config's pad id (so RoBERTa's positions
    differ from one row to the next), ids drawn from 3 up (no special token of the tiny configs)."""
    g = torch.Generator().manual_seed(seed)
    lengths = (12, 9, 5, 12)
    ids = torch.randint(3, config.vocab_size, (len(lengths), max(lengths)), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    ids[mask == 0] = pad_id(config)
    return {"input_ids": ids, "attention_mask": mask}


def max_diffs(ours: torch.nn.Module, theirs: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Max |bertkit - transformers| at the real tokens of `batch`: every hidden state (the embeddings and each
    layer: 'hidden_states.i') and each output field both have (the heads' logits, the pooled output)."""
    mask = batch["attention_mask"].bool()
    if type(ours).__name__ == "BertForMultipleChoice":  # two choices per example: the batch twice
        batch = {k: torch.stack([v, v.flip(0)], 1) for k, v in batch.items()}
        mask = batch["attention_mask"].reshape(-1, mask.shape[-1]).bool()
    with torch.no_grad():
        got = ours(**batch, output_hidden_states=True)
        ref = theirs(**batch, output_hidden_states=True)
    assert len(got.hidden_states) == len(ref.hidden_states)
    diffs = {f"hidden_states.{i}": _diff(a, b, mask) for i, (a, b) in enumerate(zip(got.hidden_states,
                                                                                     ref.hidden_states))}
    for theirs_name, ours_name in LOGITS.items():
        b = getattr(ref, theirs_name, None)
        if b is not None:
            diffs[ours_name] = _diff(getattr(got, ours_name), b, mask)
    return diffs


def _diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Max abs difference; a per-token tensor is read at the real tokens only (bertkit returns zeros at padding)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.shape[:2] == mask.shape:
        a, b = a[mask], b[mask]
    return (a.float() - b.float()).abs().max().item()
