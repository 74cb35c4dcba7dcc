"""`bertkit prepare-pretraining`: text files -> sharded masked-LM + next-sentence pre-training data."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bertkit.data.config import BAD_UTF8_POLICIES, INSTANCE_FORMATS, LAYOUTS, PretrainingDataConfig
from bertkit.io import check_output_dir

_DEFAULTS = PretrainingDataConfig()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `prepare-pretraining` verb; its options mirror PretrainingDataConfig one to one."""
    p = subparsers.add_parser(
        "prepare-pretraining",
        help="turn text files into sharded pre-training instances",
        description="Read .txt/.txt.gz (one sentence per line with blank lines between documents, or free "
        "paragraphs with WikiText/chapter headings) and .jsonl ('text' field) files; write masked-LM + "
        "next-sentence instances as memory-mappable shards with an index (google-research/bert's recipe).",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="text/JSONL files or folders of them")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder (vocab.txt, tokenizer_config.json)")
    d = _DEFAULTS
    p.add_argument("--instances", choices=INSTANCE_FORMATS, default=d.instances,
                   help="sentence_pairs: [CLS] A [SEP] B [SEP] + next-sentence label (the paper); full_sentences: "
                   "RoBERTa's packing across documents, for masked LM alone (default %(default)s)")
    p.add_argument("--max-seq-length", type=int, default=d.max_seq_length)
    p.add_argument("--dupe-factor", type=int, default=d.dupe_factor, help="passes over the corpus (default %(default)s)")
    p.add_argument("--short-seq-prob", type=float, default=d.short_seq_prob)
    p.add_argument("--masked-lm-prob", type=float, default=d.masked_lm_prob)
    p.add_argument("--max-predictions-per-seq", type=int, default=d.max_predictions_per_seq)
    p.add_argument("--whole-word-mask", action="store_true", help="mask all pieces of a word together")
    p.add_argument("--dynamic-masking", action="store_true", help="store unmasked tokens; the collator masks per epoch")
    p.add_argument("--reference-nsp", action="store_true",
                   help="one-sentence chunks always get a random B, exactly as google-research/bert (~56%% random)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into an output folder that holds other files (a dataset folder of its own is rebuilt)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workers", type=int, default=1, help="parallel processes (the output does not depend on it)")
    p.add_argument("--layout", choices=LAYOUTS, default=d.layout)
    p.add_argument("--on-bad-utf8", choices=BAD_UTF8_POLICIES, default=d.on_bad_utf8)
    p.add_argument("--text-field", default=d.text_field, help="JSONL field holding the text")
    p.add_argument("--chunk-documents", type=int, default=d.chunk_documents,
                   help="documents per shard; random B sentences come from the same chunk")
    p.add_argument("--chunk-chars", type=int, default=d.chunk_chars, help="characters per chunk at most (memory bound)")
    p.set_defaults(func=prepare_pretraining_command)


def _config_from_args(args: argparse.Namespace) -> PretrainingDataConfig:
    return PretrainingDataConfig(
        instances=args.instances,
        max_seq_length=args.max_seq_length,
        short_seq_prob=args.short_seq_prob,
        masked_lm_prob=args.masked_lm_prob,
        max_predictions_per_seq=args.max_predictions_per_seq,
        dupe_factor=args.dupe_factor,
        whole_word_mask=args.whole_word_mask,
        dynamic_masking=args.dynamic_masking,
        balanced_nsp=not args.reference_nsp,
        seed=args.seed,
        layout=args.layout,
        on_bad_utf8=args.on_bad_utf8,
        text_field=args.text_field,
        chunk_documents=args.chunk_documents,
        chunk_chars=args.chunk_chars,
    )


def _check_output(folder: Path, overwrite: bool) -> None:
    """A prepared (or half-prepared) dataset folder is rebuilt; any other non-empty folder needs --overwrite."""
    from bertkit.data.prepare import CONFIG_FILE, TOKENIZER_DIR
    from bertkit.data.shards import INDEX_FILE

    def ours(p: Path) -> bool:
        return p.name.startswith(("shard-", ".")) or p.name in (INDEX_FILE, CONFIG_FILE, TOKENIZER_DIR)

    if folder.is_dir() and not all(ours(p) for p in folder.iterdir()):
        check_output_dir(folder, overwrite)


def prepare_pretraining_command(args: argparse.Namespace) -> int:
    """Handler of `bertkit prepare-pretraining`: build the dataset, show progress, print a summary."""
    from bertkit.data.prepare import prepare_pretraining
    from bertkit.progress import progress_bar

    config = _config_from_args(args)
    _check_output(Path(args.output), args.overwrite)
    from bertkit.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(args.tokenizer)
    start = time.perf_counter()
    with progress_bar(None, "prepare-pretraining", "shard") as bar:

        def progress(documents: int, stats) -> None:
            bar.update(1)
            bar.set_postfix(documents=documents, instances=stats.instances)

        result = prepare_pretraining(args.inputs, args.output, tokenizer, config, args.workers, progress)
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
