"""The pre-training job: BertForPreTraining on prepared shards (masked LM + next sentence), one or two phases;
`run(PretrainConfig)` is `bertkit pretrain`.

The paper (Devlin et al. 2019, appendix A.2) trains 90% of the steps at sequence length 128 and the last 10% at
512, under one learning-rate schedule: here each phase names its own prepared folder, step count and batch size.
Evaluation on a held-out prepared folder reports MLM loss, MLM accuracy, NSP accuracy and perplexity.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bertkit.dataclass_io import Config, field_of, spec
from bertkit.errors import ConfigError
from bertkit.model.execution import Execution, check_mlm_slots
from bertkit.pretrained import resolve_model_dir
from bertkit.runtime import cpu_has_native_bf16
from bertkit.training.config import TrainingConfig, config_from_dict

if TYPE_CHECKING:  # torch and the trainer are imported where a run starts: the configs read without them
    import torch

    from bertkit.model.folder import FolderConfig
    from bertkit.training.trainer import TrainResult

CONFIG_COPY = "pretrain_config.yaml"


@dataclass
class PhaseConfig(Config):
    """One phase of pre-training: its prepared data folder, its optimizer steps and its micro-batch size."""

    data: str = spec("")
    """Folder written by `bertkit prepare-pretraining` (e.g. max_length 128, then 512)."""
    max_steps: int | None = field_of(TrainingConfig, "max_steps", None)
    """Optimizer updates in this phase (paper: 900,000 at 128 then 100,000 at 512); None = training.max_steps."""
    batch_size: int | None = field_of(TrainingConfig, "batch_size", None)
    """Micro-batch size of this phase; None = training.batch_size (length 512 usually needs a smaller one)."""
    grad_accum_steps: int | None = field_of(TrainingConfig, "grad_accum_steps", None)
    """Micro-batches per update in this phase; None = training.grad_accum_steps. Phases over the same data with a
    growing batch_size x grad_accum_steps make a batch-size ramp (Cramming, Geiping & Goldstein 2022)."""


@dataclass
class ExecutionConfig(Config):
    """How a pre-training step computes (bertkit.model.execution): each lever gives the same loss and gradients as
    the plain path, so only the speed depends on them. None leaves the choice to `Execution.for_step`."""

    sparse_mlm: bool = True
    """Compute the MLM transform and vocabulary decoder only at the masked positions (NVIDIA's BERT, MosaicBERT), with
    about 15% of the decoder's work. False: every position, as transformers does (the plain path, for comparison)."""
    sparse_last_layer: bool = True
    """With sparse_mlm: the last encoder layer computes its queries, output projections and feed-forward block
    only where the heads read it (the masked positions and [CLS]; every token stays a key and value of its
    attention). False: that layer at every position."""
    unpadded: bool | None = None
    """Run the linear layers, LayerNorm and GELU on the real tokens only, not on padding, with attention grouped by
    length on a CPU. None (default): True, except under bf16 autocast on a CPU, where fixed shapes run faster."""
    mlm_slots: int | None = field_of(Execution, "mlm_slots", None)
    """With sparse_mlm: 0 takes the masked positions as they come (their number changes with every batch); N > 0 a
    fixed block of N places per sequence in each training step, at least the data's max_predictions_per_seq, so
    that every step has the same shapes, as `training.compile: reduce-overhead` (CUDA graphs) needs; evaluation
    takes the masked positions. None (default): 0, except under bf16 autocast on a CPU: the data's
    max_predictions_per_seq."""

    def validate(self) -> None:
        check_mlm_slots(self.sparse_mlm, self.mlm_slots, "ExecutionConfig.mlm_slots")

    def plan(self, device: torch.device, precision: str, max_predictions: int) -> tuple[Execution, str | None]:
        """The step's plan on this device and precision, and the note to print when the policy chose for None."""
        return Execution.for_step(device, precision, max_predictions, sparse_mlm=self.sparse_mlm,
                                  sparse_last_layer=self.sparse_last_layer, unpadded=self.unpadded,
                                  mlm_slots=self.mlm_slots)


# PretrainConfig's fields before they became its `execution` group: a config file that still has them is read
# into the group.
EXECUTION_FIELDS = ("sparse_mlm", "sparse_last_layer", "unpadded", "mlm_slots")


def _paper_training() -> TrainingConfig:
    """The paper's pre-training run: 1M steps, lr 1e-4, 10k warm-up (batch 256 = batch_size x accumulation)."""
    return TrainingConfig(output_dir="runs/pretrain", max_steps=1_000_000, eval_every=10_000, save_every=10_000,
                          log_every=100, metric_for_best="loss", greater_is_better=False)


@dataclass
class PretrainConfig(Config):
    """Everything `bertkit pretrain` needs: model, data, evaluation and the trainer's config."""

    model: str = spec("mini")
    """A size preset (tiny, mini, small, medium, base, large) or a model folder to continue from."""
    model_overrides: dict[str, Any] = field(default_factory=dict)
    """BertConfig fields changed from the preset/folder (e.g. {hidden_dropout_prob: 0.0}). vocab_size defaults
    to the data's tokenizer; set explicitly it must match it."""
    train_data: str | None = spec(None)
    """One prepared folder for a single-phase run (steps from training.max_steps or epochs)."""
    phases: list[PhaseConfig] = field(default_factory=list)
    """Two-phase (or more) schedule, run as one run with one LR schedule; used instead of train_data."""
    eval_data: str | None = spec(None)
    """Held-out prepared folder; None = no evaluation (and no best/ model)."""
    eval_batches: int = spec(50, ge=0, le=10**9)
    """Batches of eval_data per evaluation (None-like 0 = all of it)."""
    eval_batch_size: int | None = field_of(TrainingConfig, "batch_size", None)
    """Batch size of evaluation; None = training.batch_size."""
    next_sentence_prediction: bool | None = None
    """Train the next-sentence head (the paper) or not (RoBERTa: masked LM alone, Liu et al. 2019, section 4.2).
    None = whenever the training data holds sentence pairs (`prepare-pretraining --instances`)."""
    masking: dict[str, Any] = field(default_factory=dict)
    """For dynamic-masking data: masking fields of PretrainingDataConfig that replace the data's own, e.g.
    {masked_lm_prob: 0.3, max_predictions_per_seq: 40} (Wettig et al. 2023: rates above 15% can train better) or
    {mask_token_prob: 1.0, random_token_prob: 0.0}. Evaluation keeps the held-out data's own masking."""
    pad_to_multiple_of: int | None = spec(8, ge=1, le=4096)
    """Pad each batch's length to a multiple of this (tensor-core friendly); None = to the longest."""
    verify_checksums: bool = True
    """Check the shards' sha256 against index.json when opening the data."""
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    """How a step computes: sparse MLM, the sparse last layer, unpadded layers, fixed MLM slots (ExecutionConfig).
    They choose the speed, not the model: weights, config.json and the loss stay the same."""
    training: TrainingConfig = field(default_factory=_paper_training)
    """Optimizer, schedule, batching, precision, checkpoints (see TrainingConfig)."""

    def validate(self) -> None:
        if self.train_data and self.phases:
            raise ConfigError("PretrainConfig: give either train_data or phases, not both")
        from bertkit.model import BertConfig

        known = {f.name for f in dataclasses.fields(BertConfig)}
        unknown = sorted(set(self.model_overrides) - known)
        if unknown:
            raise ConfigError(f"PretrainConfig.model_overrides: unknown BertConfig field(s) {', '.join(unknown)}; "
                              f"known: {', '.join(sorted(known))}")

    def phase_list(self) -> list[PhaseConfig]:
        """The phases to run (train_data as a single phase)."""
        if self.phases:
            return self.phases
        if not self.train_data:
            raise ConfigError("PretrainConfig: no training data; set train_data or phases")
        return [PhaseConfig(self.train_data)]

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "PretrainConfig") -> "PretrainConfig":
        """Inverse of `to_dict`; fields missing from `training` keep the paper's pre-training defaults. The lever
        fields a config had at its top level before the `execution` group are read into it."""
        d = dict(d)
        attention = d.pop("attention", "auto")
        if attention not in ("auto", "padded"):
            raise ConfigError(f"{where}.attention = {attention!r}: attention is no longer a setting (the one way "
                              "groups the sequences by length on a CPU; 'jagged' is gone); delete the line")
        old = {k: d.pop(k) for k in EXECUTION_FIELDS if k in d}
        if old:
            given = d.get("execution") or {}
            if not isinstance(given, dict) or set(old) & set(given):
                raise ConfigError(f"{where}: {', '.join(old)} moved into the execution group; give each once, as "
                                  f"execution.{next(iter(old))}")
            d["execution"] = {**given, **old}
        if isinstance(d.get("training"), dict):
            d["training"] = config_from_dict(TrainingConfig, {**_paper_training().to_dict(), **d["training"]},
                                             f"{where}.training")
        return config_from_dict(cls, d, where)


def _open_dataset(folder: str, verify: bool):  # noqa: ANN202 (a PretrainingDataset)
    from bertkit.data import PretrainingDataset

    if not Path(folder).is_dir():
        raise ConfigError(f"{folder}: no such prepared data folder (run `bertkit prepare-pretraining` first)")
    return PretrainingDataset(folder, verify_checksums=verify)


MASKING_FIELDS = ("masked_lm_prob", "max_predictions_per_seq", "mask_token_prob", "random_token_prob",
                  "whole_word_mask")


def loader_note(device: torch.device, num_workers: int) -> str | None:
    """A hint when a GPU run builds its batches in the training process, while the GPU waits; None otherwise."""
    if device.type != "cuda" or num_workers > 0:
        return None
    return ("note: training.num_workers is 0, so the batches are built in the training process between steps while "
            "the GPU waits; set training.num_workers to 1 or 2 to build them during the steps")


def precision_note(device: torch.device, precision: str, native_bf16: bool) -> str | None:
    """A hint when `precision: auto` leaves a CPU with bf16 matrix units (`native_bf16`) in float32
    (docs/results/pretrain-bf16-cpu-xeon-amx-2026-11-27.md); `auto` itself stays float32 on every CPU, so that a
    run's numbers do not depend on which CPU it lands on. None when there is nothing to say."""
    if device.type != "cpu" or precision != "auto" or not native_bf16:
        return None
    return ("note: this CPU multiplies bf16 matrices in hardware (AVX512-BF16/AMX): --training.precision bf16 "
            "pre-trained the mini recipe 1.85x faster than float32 on an AMX Xeon, within bf16's rounding; precision "
            "'auto' stays float32")


def pretraining_collator(dataset: Any, seed: int, config: PretrainConfig, evaluation: bool = False):  # noqa: ANN202
    """The collator of one data folder. For training, `config.masking` replaces the folder's mask settings
    (dynamic masking only); held-out data keeps its own, so every run is scored on the same task."""
    from bertkit.data import PretrainingCollator

    data_config = dataset.config
    masking = {} if evaluation else config.masking
    if masking:
        unknown = sorted(set(masking) - set(MASKING_FIELDS))
        if unknown:
            raise ConfigError(f"PretrainConfig.masking: unknown field(s) {', '.join(unknown)}; expected some of "
                              f"{', '.join(MASKING_FIELDS)}")
        if not dataset.dynamic_masking:
            raise ConfigError(f"PretrainConfig.masking is set but {dataset.folder} holds static masks; prepare it "
                              "with --dynamic-masking to choose masks at training time")
        data_config = dataclasses.replace(data_config, **masking)  # validates the values
    return PretrainingCollator(dataset.vocab_info(), dynamic_masking=dataset.dynamic_masking, config=data_config,
                               seed=seed, pad_to_multiple_of=config.pad_to_multiple_of,
                               next_sentence=config.next_sentence_prediction)


def build_model(config: PretrainConfig, vocab_size: int, vocab_source: Path, max_length: int,  # noqa: ANN201
                model_folder: FolderConfig | None = None, execution: Execution = Execution()):
    """BertForPreTraining from a preset (vocab_size from the tokenizer) or a folder (`model_folder`: its config.json
    as the caller read it), computing its forward passes as `execution` says; checks vocab and length."""
    from bertkit.model import PRESETS, BertConfig, BertForPreTraining
    from bertkit.model.folder import load_model, read_folder

    overrides = dict(config.model_overrides)
    if config.model in PRESETS:
        overrides.setdefault("vocab_size", vocab_size)
        model = BertForPreTraining(BertConfig.preset(config.model, **overrides), execution)
        where = f"preset {config.model!r} with model_overrides"
    elif model_folder is not None or resolve_model_dir(config.model).is_dir():  # a folder, or a shipped model's
        folder = read_folder(model_folder or config.model)  # name: continued pre-training (or distillation)
        model = load_model(folder, BertForPreTraining.__name__, execution=execution, **overrides)
        where = str(folder.config_path)
    else:
        raise ConfigError(f"PretrainConfig.model = {config.model!r}: neither a preset ({', '.join(PRESETS)}), "
                          "a model folder nor a shipped model's name")
    mc = model.config
    if mc.vocab_size != vocab_size:
        raise ConfigError(f"model vocab_size is {mc.vocab_size} ({where}) but the data's tokenizer has {vocab_size} "
                          f"tokens ({vocab_source}); they must be equal")
    if max_length > mc.max_sequence_length:
        raise ConfigError(f"the data has sequences of {max_length} tokens but the model's "
                          f"positions cover {mc.max_sequence_length}")
    return model


def make_evaluate(dataset: Any, collate: Any, batch_size: int, max_batches: int):  # noqa: ANN201
    """An evaluate callback: MLM loss/accuracy, NSP loss/accuracy, perplexity over the first batches of `dataset`."""
    from bertkit.model.heads import labelled_logits

    def evaluate(model: torch.nn.Module) -> dict[str, float]:
        device = next(model.parameters()).device
        n = min(len(dataset), max_batches * batch_size) if max_batches else len(dataset)
        mlm_loss = mlm_correct = mlm_count = 0.0
        nsp_loss = nsp_correct = nsp_count = 0.0
        for start in range(0, n, batch_size):
            batch = collate(dataset.__getitems__(range(start, min(n, start + batch_size))))
            batch = {k: v.to(device) for k, v in batch.items()}
            out = model(**batch)
            logits, labels = labelled_logits(out.prediction_logits, out.mlm_positions, batch["labels"])
            k = labels.numel()
            if k:
                mlm_loss += float(out.mlm_loss) * k
                mlm_correct += float((logits.argmax(-1) == labels).sum())
                mlm_count += k
            if "next_sentence_label" in batch:
                b = batch["next_sentence_label"].numel()
                nsp_loss += float(out.nsp_loss) * b
                nsp_correct += float((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
                nsp_count += b
        mlm = mlm_loss / max(mlm_count, 1)
        metrics = {"loss": mlm, "mlm_loss": mlm, "mlm_accuracy": mlm_correct / max(mlm_count, 1),
                   "perplexity": math.exp(min(mlm, 50.0))}
        if nsp_count:
            nsp = nsp_loss / nsp_count
            metrics.update(loss=mlm + nsp, nsp_loss=nsp, nsp_accuracy=nsp_correct / nsp_count)
        return metrics

    return evaluate


def check_same_vocabulary(model_dir: Path, data_vocab: Path) -> None:
    """ConfigError unless a model folder's vocabulary is the data's, token for token: token ids index the embedding
    rows, so data prepared with another tokenizer of the same size would train the rows under other tokens."""
    from bertkit.errors import CheckpointError
    from bertkit.tokenizer import BertTokenizer

    def tokens(folder: Path) -> list[str]:
        vocab = BertTokenizer.from_pretrained(folder).vocab
        return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]

    try:
        model_tokens = tokens(model_dir)
    except CheckpointError as e:
        raise ConfigError(f"{model_dir} has no vocabulary to check the data's ({data_vocab}) against: {e}; put the "
                          "vocab.txt the model was trained with into the folder") from None
    data_tokens = tokens(data_vocab.parent)
    if model_tokens == data_tokens:
        return
    model_vocab = model_dir / "vocab.txt" if (model_dir / "vocab.txt").is_file() else model_dir / "tokenizer.json"
    i = next((i for i, (a, b) in enumerate(zip(model_tokens, data_tokens)) if a != b),
             min(len(model_tokens), len(data_tokens)))
    found = [repr(t[i]) if i < len(t) else "nothing" for t in (data_tokens, model_tokens)]
    raise ConfigError(f"{data_vocab} differs from {model_vocab} at line {i + 1} (token id {i}): {found[0]} in the "
                      f"data's vocabulary, {found[1]} in the model's. The data was prepared with another tokenizer, "
                      "so its ids would train the wrong embedding rows; prepare it with the model's (bertkit "
                      f"prepare-pretraining --tokenizer {model_dir})")


def pretrain_fingerprint(config: PretrainConfig, model_dir: Path | None, eval_batch_size: int) -> dict[str, Any]:
    """The data and settings of a pre-training run a resume must match (bertkit.training.provenance). A resume may
    change the phases' max_steps (how far to train) and verify_checksums (a check of the input, not a setting)."""
    from bertkit.io import folder_identity
    from bertkit.training.provenance import flatten, prepared_identity

    fp: dict[str, Any] = {"model": folder_identity(model_dir) if model_dir is not None else config.model,
                          **flatten("model_overrides", config.model_overrides)}
    if config.phases:
        fp.update({f"phases.{k}.data": prepared_identity(p.data) for k, p in enumerate(config.phases)})
    else:
        fp["train_data"] = prepared_identity(config.train_data or "")
    fp.update({"eval_data": prepared_identity(config.eval_data) if config.eval_data else None,
               "eval_batches": config.eval_batches, "eval_batch_size": eval_batch_size,
               "next_sentence_prediction": config.next_sentence_prediction,
               **flatten("masking", config.masking), "pad_to_multiple_of": config.pad_to_multiple_of})
    return fp


def run(config: PretrainConfig, resume: bool = False,
        wrap_model: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
        fingerprint: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        on_start: Callable[[], None] | None = None, model_folder: FolderConfig | None = None) -> TrainResult:
    """Build model, data and evaluation from `config`, then train; final/ is a from_pretrained folder + tokenizer.

    A wrapping job (distillation) passes `wrap_model`, which turns the built model into the module trained,
    `fingerprint`, which turns this job's fingerprint into its own, `on_start`, which writes its record once the run
    starts, and `model_folder`, config.model's config.json as it read it (`read_folder`)."""
    import torch

    from bertkit.model import PRESETS
    from bertkit.tokenizer import BertTokenizer
    from bertkit.training.distributed import setup_distributed
    from bertkit.training.precision import resolve_precision
    from bertkit.training.trainer import Trainer, TrainPhase
    from bertkit.training.provenance import check_output_apart
    from bertkit.training.checkpoint import output_lock

    t = config.training
    dist_info = setup_distributed(t.device)
    model_dir = None if config.model in PRESETS else resolve_model_dir(config.model)
    if model_dir is not None and model_dir.is_dir():
        check_output_apart(t.output_dir, model_dir, "the model folder")
    with output_lock(t.output_dir, dist_info):  # before anything is read: a second job stops at once
        phase_cfgs = config.phase_list()
        datasets = [_open_dataset(p.data, config.verify_checksums) for p in phase_cfgs]
        tok_dir = datasets[0].tokenizer_dir
        vocab_text = (tok_dir / "vocab.txt").read_text(encoding="utf-8")
        eval_ds = _open_dataset(config.eval_data, config.verify_checksums) if config.eval_data else None
        for ds in datasets[1:] + ([eval_ds] if eval_ds is not None else []):
            if (ds.tokenizer_dir / "vocab.txt").read_text(encoding="utf-8") != vocab_text:
                raise ConfigError(f"{ds.tokenizer_dir / 'vocab.txt'} differs from {tok_dir / 'vocab.txt'}: every "
                                  "data folder of a run must be prepared with the same tokenizer")
        tokenizer = BertTokenizer.from_pretrained(tok_dir)
        # Phase k draws its dynamic masks from seed + k: phases over the same data (a batch ramp) see new masks.
        collators = [pretraining_collator(ds, t.seed + k, config) for k, ds in enumerate(datasets)]
        most_predictions = max(collator.config.max_predictions_per_seq for collator in collators)
        plan, plan_note = config.execution.plan(dist_info.device, resolve_precision(t.precision, dist_info.device),
                                                most_predictions)
        for note in (loader_note(dist_info.device, t.num_workers),
                     precision_note(dist_info.device, t.precision, cpu_has_native_bf16()), plan_note):
            if note and dist_info.is_main:
                print(note, file=sys.stderr)
        for ds, collator in zip(datasets, collators):
            most = collator.config.max_predictions_per_seq
            if 0 < plan.mlm_slots < most:
                raise ConfigError(f"PretrainConfig.execution.mlm_slots = {plan.mlm_slots}: {ds.folder} masks up to "
                                  f"{most} positions per sequence (max_predictions_per_seq); give at least {most}")
        torch.manual_seed(t.seed)  # the initial weights are a function of the seed
        max_len = max(ds.config.max_length for ds in datasets)
        model = build_model(config, tokenizer.vocab_size, tok_dir / "vocab.txt", max_len, model_folder, plan)
        if model_dir is not None:  # continued pre-training (or distillation) from a folder: the same vocabulary
            check_same_vocabulary(model_dir, tok_dir / "vocab.txt")
        if wrap_model is not None:
            model = wrap_model(model)
        phases = [TrainPhase(ds, collator, p.max_steps, p.batch_size, name=Path(p.data).name,
                             grad_accum_steps=p.grad_accum_steps)
                  for ds, collator, p in zip(datasets, collators, phase_cfgs)]
        evaluate = None
        eval_batch_size = config.eval_batch_size or t.batch_size
        if eval_ds is not None:
            # Evaluation masks are drawn once (epoch 0 of a fixed seed), so every evaluation sees the same task; NSP
            # is scored when the held-out data has sentence pairs and the run trains NSP.
            eval_config = dataclasses.replace(config, next_sentence_prediction=(
                eval_ds.config.next_sentence and config.next_sentence_prediction is not False
                and all(ds.config.next_sentence for ds in datasets)))
            evaluate = make_evaluate(eval_ds, pretraining_collator(eval_ds, t.seed, eval_config, evaluation=True),
                                     eval_batch_size, config.eval_batches)
        fp = pretrain_fingerprint(config, model_dir, eval_batch_size)

        def write_records() -> None:
            config.save(Path(t.output_dir) / CONFIG_COPY)
            if on_start is not None:
                on_start()

        trainer = Trainer(model, t, phases=phases, evaluate=evaluate,
                          save_extra=tokenizer.save_pretrained, dist_info=dist_info,
                          fingerprint=fingerprint(fp) if fingerprint is not None else fp, on_start=write_records)
        return trainer.train(resume=resume)
