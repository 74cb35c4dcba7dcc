"""`bertkit prepare-pretraining`: text files -> sharded masked-LM + next-sentence pre-training data."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bertkit.cli.config_options import PREFIX, add_options, config_from_options
from bertkit.data.config import PretrainingDataConfig
from bertkit.data.prepare import PrepareOptions
from bertkit.io import check_output_dir
from bertkit.pretrained import resolve_model_dir

_ALIASES = {"max_length": ("max_seq_length",)}  # google-research/bert's create_pretraining_data.py spelling


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `prepare-pretraining` verb; its options are PretrainingDataConfig's fields, generated."""
    p = subparsers.add_parser(
        "prepare-pretraining",
        description="Read .txt/.txt.gz (one sentence per line with blank lines between documents, or free "
        "paragraphs with WikiText/chapter headings) and .jsonl ('text' field) files; write masked-LM + "
        "next-sentence instances as memory-mappable shards with an index (google-research/bert's recipe).",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="text/JSONL files or folders of them")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder (vocab.txt, tokenizer_config.json)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into an output folder that holds other files (a dataset folder of its own is rebuilt)")
    p.add_argument("--reference-nsp", dest=PREFIX + "balanced_nsp", action="store_false", default=argparse.SUPPRESS,
                   help="one-sentence chunks always get a random B, exactly as google-research/bert (~56%% random); "
                   "the same as --no-balanced-nsp")
    # Every PretrainingDataConfig field is an option, with its docstring as help: one source of truth.
    add_options(p, PretrainingDataConfig, aliases=_ALIASES, switches=True)
    add_options(p, PrepareOptions)
    p.set_defaults(func=prepare_pretraining_command)


def _config_from_args(args: argparse.Namespace) -> PretrainingDataConfig:
    return config_from_options(PretrainingDataConfig, args)


def _check_output(folder: Path, overwrite: bool) -> None:
    """A prepared (or half-prepared) dataset folder is rebuilt; any other non-empty folder needs --overwrite."""
    from bertkit.data.prepare import CONFIG_FILE, TOKENIZER_DIR
    from bertkit.data.shards import INDEX_FILE

    ours = (INDEX_FILE, CONFIG_FILE, TOKENIZER_DIR)
    if folder.is_dir() and not all(p.name.startswith(("shard-", ".")) or p.name in ours for p in folder.iterdir()):
        check_output_dir(folder, overwrite)


def prepare_pretraining_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit prepare-pretraining`: build the dataset, show progress, print a summary."""
    from bertkit.data.prepare import prepare_pretraining
    from bertkit.progress import progress_bar

    config = _config_from_args(args)
    workers = config_from_options(PrepareOptions, args)
    _check_output(Path(args.output), args.overwrite)
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(resolve_model_dir(args.tokenizer))  # or a shipped model's name
    start = time.perf_counter()
    with progress_bar(None, "prepare-pretraining", "shard") as bar:

        def progress(documents: int, stats) -> None:
            bar.update(1)
            bar.set_postfix(documents=documents, instances=stats.instances)

        result = prepare_pretraining(args.inputs, args.output, tokenizer, config, workers.workers, progress)
    c, s = result.corpus, result.shards
    print(f"wrote {result.output_dir} in {time.perf_counter() - start:.1f}s")
    print(f"  files          {c.files} ({c.empty_files} empty, skipped; {c.bad_utf8_lines} undecodable lines skipped)")
    print(f"  documents      {s.documents} ({c.single_sentence_documents + s.single_sentence_documents} single-sentence"
          f" skipped, {c.documents_split} long ones split)")
    print(f"  sentences      {s.sentences} ({s.truncated_sentences} truncated to {config.max_num_tokens} tokens, "
          f"{s.empty_sentences} empty dropped)")
    random_share = s.random_next / s.instances if s.instances else 0.0
    print(f"  instances      {s.instances} ({random_share:.1%} random next; {s.unpaired_last_sentences} "
          f"last sentences without a pair)")
    print(f"  tokens         {s.tokens}" + (f" ({s.masked} masked)" if s.masked else " (masks drawn at training time)"))
    print(f"  shards         {result.num_shards}")
    print(f"  peak RSS       {result.peak_rss_mib:.0f} MiB")
    return 0
