"""Model folders of BERT's family built without the network, as transformers writes them, from a small random
config: what the family tests (tests/model, the workflow tests in tests/jobs, tests/serve, tests/inference) and
benchmarks/bench_family_parity.py share (`import family_models`: pytest puts tests/ on sys.path).

Each family's model is built by transformers' own classes (`transformers.RobertaForMaskedLM(config)`, ...) and
written by its `save_pretrained`, so the folder is what a published checkpoint of that family holds. For the
workflows, `model_folder` adds the family's real tokenizer (tests/family_folders.py: trained on the shared texts)
and, if asked, sentence-transformers' files.
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


# ----------------------------------------------------------------------------------------------------------------
# Folders the workflows run on: a tiny model with the family's own tokenizer.
# ----------------------------------------------------------------------------------------------------------------

WORKFLOW_VOCAB = 1024  # above every family's trained vocabulary (tests/family_folders.py: 1,000 pieces + specials)
WORKFLOW_LENGTH = 128  # the longest sequence: RoBERTa's table has pad_token_id + 1 rows more


def model_folder(family: str, folder: Path, data_dir: Path, head: str = "BertModel", pooling: str | None = None,
                 seed: int = 0) -> Path:
    """A tiny model of `family` (random weights) with the family's tokenizer in `folder`; with `pooling` ('mean' or
    'cls'), also sentence-transformers' modules.json, 1_Pooling/config.json (and normalisation) and
    sentence_bert_config.json, as a sentence-embedding model of the family (all-distilroberta-v1, multilingual
    E5) has them."""
    import json

    from family_folders import write_tokenizer

    positions = WORKFLOW_LENGTH + (2 if family in ("roberta", "xlm-roberta") else 0)
    write_folder(family, head, folder, seed=seed, vocab_size=WORKFLOW_VOCAB, max_position_embeddings=positions)
    write_tokenizer(family, folder, data_dir)
    if pooling is not None:
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
        (folder / "modules.json").write_text(json.dumps(modules))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": TINY["hidden_size"], "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean", "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False}))
        (folder / "2_Normalize").mkdir()
        (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48, "do_lower_case": False}))
    return folder


# ----------------------------------------------------------------------------------------------------------------
# Fine-tuned folders: each task on a few real examples, made once per test session.
# ----------------------------------------------------------------------------------------------------------------

# task -> (the task's name, its data file (written by `task_files`), its options).
TASKS = {
    "pairs": ("classification", "pairs.tsv", ["--max-length", "32"]),
    "single": ("classification", "single.tsv", ["--max-length", "32"]),
    "ner": ("ner", "ner.txt", ["--max-length", "32"]),
    "qa": ("qa", "qa.json", ["--max-length", "96", "--doc-stride", "32"]),
    "multiple-choice": ("multiple-choice", "choices.jsonl", ["--max-length", "32"]),
}
_MADE: dict[tuple[str, ...], Path] = {}  # folders made once per test session (this module is imported once)


def task_files(factory: Any, data_dir: Path, choice_questions: list[dict]) -> Path:
    """A few real examples per task (once per session, in a folder of `factory`, pytest's tmp_path_factory): MRPC
    pairs, SST-2 sentences, CoNLL-2003 sentences, SQuAD's first article's first paragraphs, COPA-like choices."""
    import json

    def make(out: Path) -> Path:
        def head(path: str, lines: int, encoding: str = "utf-8") -> str:
            return "\n".join((data_dir / path).read_text(encoding=encoding).splitlines()[:lines]) + "\n"

        (out / "pairs.tsv").write_text(head("mrpc/train.tsv", 41, "utf-8-sig"))
        (out / "single.tsv").write_text(head("sst2/train.tsv", 41))
        (out / "ner.txt").write_text(head("conll2003/train.txt", 400))
        squad = json.loads((data_dir / "squad_v1.1/dev-v1.1.json").read_text())
        article = squad["data"][0]
        squad["data"] = [{**article, "paragraphs": article["paragraphs"][:4]}]
        (out / "qa.json").write_text(json.dumps(squad))
        (out / "choices.jsonl").write_text("".join(json.dumps(q) + "\n" for q in choice_questions * 6))
        return out

    return _once(("task-data",), factory, make)


def finetune(base: Path, out: Path, task: str, data: Path) -> dict:
    """`bertkit finetune` of `task` on its small file (training and dev alike) for one epoch; its results.json."""
    import json

    from bertkit.cli import main

    name, file, options = TASKS[task]
    assert main(["finetune", "--task", name, "--model", str(base), "--train", str(data / file), "--dev",
                 str(data / file), "--max-train-examples", "24", "--max-eval-examples", "12", "--epochs", "1",
                 "--batch-size", "8", "--output", str(out), "--no-progress", *options]) == 0
    return json.loads((out / "results.json").read_text())


def fine_tuned(family: str, task: str, factory: Any, data_dir: Path, data: Path) -> Path:
    """The family's tiny model fine-tuned on `task` (its best/ folder; base/ beside run/), once per session."""
    def make(tmp: Path) -> Path:
        finetune(model_folder(family, tmp / "base", data_dir), tmp / "run", task, data)
        return tmp / "run" / "best"

    return _once((family, task), factory, make)


def _once(key: tuple[str, ...], factory: Any, make: Any) -> Path:
    """What make(folder) returns, made the first time `key` is asked for in this session."""
    if key not in _MADE:
        _MADE[key] = make(factory.mktemp("-".join(key)))
    return _MADE[key]
