"""Tokenizer folders of BERT's family built without the network, laid out as the published checkpoints' are.

Each family's tokenizer is trained on the shared texts (byte-level BPE for RoBERTa and WordPiece for DistilBERT and
ELECTRA by `tokenizers`, Unigram for XLM-R and ALBERT by `sentencepiece`), wrapped in transformers' own class for
the family and written by its save_pretrained: tokenizer.json and tokenizer_config.json beside the family's own
vocabulary files (vocab.json + merges.txt, sentencepiece.bpe.model, spiece.model, vocab.txt). With
`own_files=True` the folder holds only the vocabulary files and tokenizer_config.json, as older checkpoints do.

Shared by the tokenizer tests and the model tests (`import family_folders`: pytest puts tests/ on sys.path):

    write_tokenizer("roberta", folder, data_dir)          # a roberta-base-like folder's tokenizer files
    transformers.AutoTokenizer.from_pretrained(folder)    # the reference tokenizer for it

Training runs once per process and family (a second or two each); the vocabulary is small (VOCAB_SIZE) so a model
built on it stays tiny.
"""

from __future__ import annotations

import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Any

FAMILY_NAMES = ("roberta", "xlm-roberta", "albert", "distilbert", "electra")
VOCAB_SIZE = 1000
MODEL_MAX_LENGTH = 512
# What each family's published tokenizer_config.json names (ELECTRA's class is BERT's in transformers 5, which
# writes "BertTokenizer"; the checkpoints say "ElectraTokenizer").
TOKENIZER_CLASS = {"roberta": "RobertaTokenizer", "xlm-roberta": "XLMRobertaTokenizer", "albert": "AlbertTokenizer",
                   "distilbert": "DistilBertTokenizer", "electra": "ElectraTokenizer"}
LOWERCASE = {"albert": True, "distilbert": False, "electra": True}  # DistilBERT cased, as distilbert-base-cased


def training_texts(data_dir: Path) -> list[str]:
    """About 3,700 real texts (350 KB; SentencePiece's Unigram training takes seconds per 100 KB): SQuAD contexts,
    SST-2 training sentences, CoNLL-2003 sentences."""
    squad = json.loads((data_dir / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
    contexts = [p["context"] for article in squad["data"] for p in article["paragraphs"]][:200]
    sst2 = [line.split("\t")[0] for line in
            (data_dir / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:2001]]
    return contexts + sst2 + conll_sentences(data_dir, "train")[:1500]


def conll_sentences(data_dir: Path, split: str) -> list[str]:
    """CoNLL-2003 sentences as text (their words joined by spaces)."""
    return [" ".join(words) for words in conll_words(data_dir, split)]


def conll_words(data_dir: Path, split: str) -> list[list[str]]:
    """CoNLL-2003 sentences as their words."""
    out: list[list[str]] = [[]]
    for line in (data_dir / "conll2003" / f"{split}.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if out[-1]:
                out.append([])
        else:
            out[-1].append(line.split(" ")[0])
    return [s for s in out if s]


@functools.cache
def _vocabulary_files(family: str, data_dir: Path, vocab_size: int) -> dict[str, bytes]:
    """The family's own vocabulary files, trained on `training_texts`."""
    texts = training_texts(data_dir)
    if family in ("xlm-roberta", "albert"):
        import sentencepiece as spm

        model = io.BytesIO()
        ids = (dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1) if family == "xlm-roberta" else  # fairseq's order
               dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"]))
        spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
                                       model_type="unigram", character_coverage=1.0, minloglevel=2, num_threads=2,
                                       **ids)
        name = "sentencepiece.bpe.model" if family == "xlm-roberta" else "spiece.model"
        return {name: model.getvalue()}
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    if family == "roberta":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(texts, trainer)
        model = json.loads(tok.to_str())["model"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        return {"vocab.json": json.dumps(model["vocab"], ensure_ascii=False).encode(),
                "merges.txt": ("#version: 0.2\n" + "".join(m + "\n" for m in merges)).encode()}
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=LOWERCASE[family])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    vocab = tok.get_vocab()
    return {"vocab.txt": "".join(t + "\n" for t in sorted(vocab, key=vocab.get)).encode()}


def _own_config(family: str) -> dict[str, Any]:
    """tokenizer_config.json of a folder that holds only the vocabulary files."""
    config: dict[str, Any] = {"tokenizer_class": TOKENIZER_CLASS[family], "model_max_length": MODEL_MAX_LENGTH}
    if family in LOWERCASE:
        config["do_lower_case"] = LOWERCASE[family]
    return config


def write_tokenizer(family: str, folder: Path, data_dir: Path, own_files: bool = False,
                    vocab_size: int = VOCAB_SIZE) -> Path:
    """Write the family's tokenizer files into `folder` (created if needed) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    files = _vocabulary_files(family, data_dir, vocab_size)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if own_files:
        (folder / "tokenizer_config.json").write_text(json.dumps(_own_config(family)), encoding="utf-8")
        return folder
    _reference(family, data_dir, vocab_size).save_pretrained(str(folder))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = TOKENIZER_CLASS[family]
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return folder


@functools.cache
def _reference(family: str, data_dir: Path, vocab_size: int) -> Any:
    """transformers' tokenizer of the family's class over the trained vocabulary files."""
    import transformers
    from tokenizers import AddedToken

    files = _vocabulary_files(family, data_dir, vocab_size)
    if family == "roberta":  # <mask> takes the space before it, as in roberta-base's tokenizer.json
        vocab = json.loads(files["vocab.json"])
        merges = [tuple(line.split(" ")) for line in files["merges.txt"].decode().splitlines()[1:]]
        return transformers.RobertaTokenizerFast(
            vocab=vocab, merges=merges, model_max_length=MODEL_MAX_LENGTH,
            mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False))
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        config = _own_config(family)
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        return transformers.AutoTokenizer.from_pretrained(tmp)
