"""FastTokenizer: the tokenizers of BERT's family (RoBERTa, XLM-R, ALBERT, DistilBERT, ELECTRA), run by Hugging Face
`tokenizers` behind BertTokenizer's interface.

bertkit writes BERT's WordPiece itself (`BertTokenizer`); the family's byte-level BPE (RoBERTa), SentencePiece
Unigram (XLM-R, ALBERT) and their WordPiece variants (DistilBERT, ELECTRA) are run by the library transformers' fast
tokenizers run, from the same files:

- `tokenizer.json` when the folder has one, read as written (normalizer, pre-tokenizer, model, added tokens, and the
  post-processor whose special tokens are laid around each window);
- otherwise the family's own files, built into the pipeline transformers builds from them: `vocab.json` +
  `merges.txt` (RoBERTa), `sentencepiece.bpe.model` (XLM-R) or `spiece.model` (ALBERT) through `sentencepiece`'s
  model description, `vocab.txt` (DistilBERT, ELECTRA) as BertTokenizer writes its tokenizer.json.

The backend only splits each text into tokens (ids, character offsets into the original text, word indices); the
windows, their order, the special tokens and padding are `TokenizerBase`'s, shared with BertTokenizer, so every
caller (the tasks, the encoder, the server) sees the same `Encoding`s from either class.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

from bertkit.errors import CheckpointError, TokenizerError
from bertkit.io import atomic_path, atomic_write_json, atomic_write_text, make_dir, read_json_object
from bertkit.pretrained import resolve_model_dir
from bertkit.tokenizer.basic import Word
from bertkit.tokenizer.families import FAMILIES, SPECIAL_NAMES, Family, tokenizer_family
from bertkit.tokenizer.tokenizer import (
    _NO_LIMIT, _TEXT_CLEANUP, DEFAULT_MODEL_MAX_LENGTH, BertTokenizer, Encoding, Layout, Sequence_, TokenizerBase,
    _cleanup, _token_name,
)

# SentencePiece's piece types (sentencepiece_model.proto): control pieces are special tokens, user-defined ones
# are matched whole in the text.
_SPM_CONTROL, _SPM_USER_DEFINED = 3, 4
SPM_EXTRA = "bertkit[sentencepiece]"


def _tokenizers() -> Any:
    """The `tokenizers` package (a dependency of bertkit), imported where a family's tokenizer is built."""
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - a broken install
        raise TokenizerError("this tokenizer needs the `tokenizers` package (pip install tokenizers)") from None
    return tokenizers


# ------------------------------------------------------------------------------------------------------------------
# Building the backend from a folder's files
# ------------------------------------------------------------------------------------------------------------------


def _added_token(content: str, special: bool, settings: dict[str, Any], **defaults: Any) -> Any:
    """An AddedToken with the properties tokenizer_config.json's added_tokens_decoder gives it, else `defaults`."""
    props = {"special": special, "normalized": False, **defaults}
    for entry in (settings.get("added_tokens_decoder") or {}).values():
        if isinstance(entry, dict) and entry.get("content") == content:
            props.update({k: entry[k] for k in ("single_word", "lstrip", "rstrip", "normalized", "special")
                          if isinstance(entry.get(k), bool)})
    return _tokenizers().AddedToken(content, **props)


def _from_tokenizer_json(path: Path, settings: dict[str, Any]) -> Any:
    """tokenizer.json as written; for the WordPiece families, tokenizer_config.json's do_lower_case, strip_accents
    and tokenize_chinese_chars set BertNormalizer's switches, as transformers' BertTokenizer does."""
    tk = _tokenizers()
    try:
        backend = tk.Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises Exception for a file it cannot read
        raise CheckpointError(f"{path}: not a tokenizer.json the tokenizers library reads ({e})") from None
    norm = backend.normalizer
    switches = {"lowercase": "do_lower_case", "strip_accents": "strip_accents",
                "handle_chinese_chars": "tokenize_chinese_chars"}
    if isinstance(norm, tk.normalizers.BertNormalizer) and any(k in settings for k in switches.values()):
        values = {attr: settings.get(key, getattr(norm, attr)) for attr, key in switches.items()}
        backend.normalizer = tk.normalizers.BertNormalizer(clean_text=norm.clean_text, **values)
    return backend


def _from_vocab_txt(folder: Path, settings: dict[str, Any], names: dict[str, str]) -> Any:
    """vocab.txt (DistilBERT, ELECTRA): the tokenizer.json BertTokenizer writes for it (BERT's pipeline)."""
    keys = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
            "tokenize_chinese_chars": "tokenize_chinese_chars"}
    bert = BertTokenizer.from_pretrained(folder / "vocab.txt", **names,
                                         **{new: settings[old] for old, new in keys.items() if old in settings})
    return _tokenizers().Tokenizer.from_str(json.dumps(bert._tokenizer_json()))


def _from_vocab_merges(folder: Path, settings: dict[str, Any], names: dict[str, str]) -> Any:
    """vocab.json + merges.txt (RoBERTa): byte-level BPE with RoBERTa's post-processor, as transformers'
    RobertaTokenizer builds it; <mask> takes the space before it (lstrip), as in the published tokenizer.json."""
    tk = _tokenizers()
    vocab, merges = folder / "vocab.json", folder / "merges.txt"
    try:
        model = tk.models.BPE.from_file(str(vocab), str(merges), dropout=None, continuing_subword_prefix="",
                                        end_of_word_suffix="", fuse_unk=False)
    except Exception as e:
        raise CheckpointError(f"{vocab}, {merges}: not a BPE vocabulary and merges the tokenizers library reads "
                              f"({e})") from None
    backend = tk.Tokenizer(model)
    prefix = bool(settings.get("add_prefix_space", False))
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    backend.decoder = tk.decoders.ByteLevel()
    backend.add_special_tokens([_added_token(names[n], True, settings, lstrip=n == "mask_token")
                                for n in SPECIAL_NAMES])
    ids = _special_ids(backend, names, vocab)
    backend.post_processor = tk.processors.RobertaProcessing(
        (names["sep_token"], ids["sep_token"]), (names["cls_token"], ids["cls_token"]),
        trim_offsets=bool(settings.get("trim_offsets", True)), add_prefix_space=prefix)
    return backend


def _spm_proto(path: Path) -> Any:
    """A SentencePiece model file's description (pieces, scores, normaliser), read with sentencepiece's protobuf."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as e:
        raise TokenizerError(f"{path}: reading a SentencePiece model needs the sentencepiece and protobuf packages "
                             f"({e}); pip install '{SPM_EXTRA}'") from None
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as e:  # protobuf's DecodeError
        raise CheckpointError(f"{path}: not a SentencePiece model ({e})") from None
    if not proto.pieces:
        raise CheckpointError(f"{path}: a SentencePiece model without pieces")
    return proto


def _from_sentencepiece(path: Path, family: Family, settings: dict[str, Any], names: dict[str, str]) -> Any:
    """sentencepiece.bpe.model (XLM-R) or spiece.model (ALBERT) built into the Unigram pipeline transformers builds
    from them: XLM-R's pieces behind fairseq's four specials with <mask> last; ALBERT's pieces as they are, behind
    its normaliser (quotes, accents stripped and lower case unless the folder keeps them); both then split on
    white space and mark word starts with "▁"."""
    tk = _tokenizers()
    proto = _spm_proto(path)
    pieces = [(p.piece, p.score) for p in proto.pieces]
    normalizers = []
    if family.name == "xlm-roberta":
        # fairseq's dictionary: <s> <pad> </s> <unk>, then the model's pieces after its own <unk> <s> </s>.
        vocab = [(names["cls_token"], 0.0), (names["pad_token"], 0.0), (names["sep_token"], 0.0),
                 (names["unk_token"], 0.0), *pieces[3:], (names["mask_token"], 0.0)]
    else:
        vocab = pieces
        normalizers = [tk.normalizers.Replace("``", '"'), tk.normalizers.Replace("''", '"')]
        if not settings.get("keep_accents", False):
            normalizers += [tk.normalizers.NFKD(), tk.normalizers.StripAccents()]
        if settings.get("do_lower_case", True):
            normalizers.append(tk.normalizers.Lowercase())
    tokens = [t for t, _ in vocab]
    if names["unk_token"] not in tokens:
        raise CheckpointError(f"{path}: no piece {names['unk_token']!r} (the unknown token)")
    backend = tk.Tokenizer(tk.models.Unigram(vocab, unk_id=tokens.index(names["unk_token"]), byte_fallback=False))
    charsmap = proto.normalizer_spec.precompiled_charsmap
    if charsmap:
        normalizers.append(tk.normalizers.Precompiled(charsmap))
    if normalizers:
        backend.normalizer = normalizers[0] if len(normalizers) == 1 else tk.normalizers.Sequence(normalizers)
    scheme = "always" if settings.get("add_prefix_space", True) else "never"
    backend.pre_tokenizer = tk.pre_tokenizers.Sequence([tk.pre_tokenizers.WhitespaceSplit(),
                                                        tk.pre_tokenizers.Metaspace("▁", prepend_scheme=scheme)])
    backend.decoder = tk.decoders.Metaspace("▁", prepend_scheme=scheme)
    # control and user-defined pieces are matched whole in the text, as transformers adds them
    extra = [_added_token(p.piece, p.type == _SPM_CONTROL, settings) for p in proto.pieces
             if p.type in (_SPM_CONTROL, _SPM_USER_DEFINED)]
    backend.add_tokens([t for t in extra if not t.special])
    backend.add_special_tokens([_added_token(names[n], True, settings) for n in SPECIAL_NAMES]
                               + [t for t in extra if t.special])
    ids = _special_ids(backend, names, path)
    cls, sep = names["cls_token"], names["sep_token"]
    b_type = 0 if family.name == "xlm-roberta" else 1
    pair = [cls, "$A:0", sep, sep, f"$B:{b_type}", f"{sep}:{b_type}"] if family.name == "xlm-roberta" else \
        [cls, "$A:0", sep, f"$B:{b_type}", f"{sep}:{b_type}"]
    backend.post_processor = tk.processors.TemplateProcessing(
        single=[cls, "$A:0", sep], pair=pair, special_tokens=[(cls, ids["cls_token"]), (sep, ids["sep_token"])])
    return backend


def _special_ids(backend: Any, names: dict[str, str], source: Path) -> dict[str, int | None]:
    """The id of each special token; cls, sep and unk must be in the vocabulary (pad and mask may be absent)."""
    ids = {n: backend.token_to_id(names[n]) for n in SPECIAL_NAMES}
    missing = [names[n] for n in ("unk_token", "cls_token", "sep_token") if ids[n] is None]
    if missing:
        raise CheckpointError(f"{source}: special token(s) {', '.join(missing)} missing from the vocabulary")
    return ids


# ------------------------------------------------------------------------------------------------------------------
# The tokenizer
# ------------------------------------------------------------------------------------------------------------------

def _layout(backend: Any, pair: bool, token_types: bool) -> Layout:
    """Where the post-processor puts its special tokens, read off one encoding of a probe text (or pair)."""
    enc = backend.encode("a", "b") if pair else backend.encode("a")
    seq, ids, types = enc.sequence_ids, enc.ids, enc.type_ids if token_types else [0] * len(enc.ids)
    parts: list[tuple[list[int], list[int]]] = [([], [])]
    seq_types = []
    for i, s in enumerate(seq):
        if s is None:
            parts[-1][0].append(ids[i])
            parts[-1][1].append(types[i])
        elif s == len(seq_types):  # the first token of the next sequence
            seq_types.append(types[i])
            parts.append(([], []))
    if len(seq_types) != (2 if pair else 1):
        raise TokenizerError("the post-processor's layout could not be read: a probe text gave no tokens")
    if not pair:
        parts.insert(1, ([], []))
        seq_types.append(seq_types[0])
    (pre, pre_t), (mid, mid_t), (post, post_t) = parts
    return pre, pre_t, seq_types[0], mid, mid_t, seq_types[1], post, post_t


def _sequences(e: Any, pair: bool) -> tuple[Sequence_, Sequence_ | None]:
    """A backend encoding's text (and pair) without the special tokens: ids, offsets and word ids of each."""
    seq, ids, offsets, words = e.sequence_ids, e.ids, e.offsets, e.word_ids
    out: list[Sequence_] = []
    for k in (0, 1) if pair else (0,):
        where = [i for i, s in enumerate(seq) if s == k]  # a sequence's tokens are contiguous
        start, stop = (where[0], where[-1] + 1) if where else (0, 0)
        out.append((ids[start:stop], offsets[start:stop], words[start:stop]))
    return out[0], out[1] if pair else None


class FastTokenizer(TokenizerBase):
    """A family's tokenizer run by Hugging Face `tokenizers`, with BertTokenizer's interface (`encode`, batches,
    truncation windows, offsets, word ids, `tokenize`, `words`, `decode`, the special tokens by the folder's names).

    `backend` is a `tokenizers.Tokenizer`; `family` the Family (or its name) that says which files stand for
    tokenizer.json and whether the model reads token types. Build one from a folder with `from_pretrained` (or
    `bertkit.tokenizer.load_tokenizer`, which picks this class or BertTokenizer by the folder's files).
    """

    def __init__(self, backend: Any, family: Family | str, unk_token: str | None = None,
                 cls_token: str | None = None, sep_token: str | None = None, pad_token: str | None = None,
                 mask_token: str | None = None, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
                 name_or_path: str = "", settings: dict[str, Any] | None = None,
                 sources: Sequence[Path] = ()) -> None:
        self.family = FAMILIES[family] if isinstance(family, str) else family
        self.backend = backend
        given = {"unk_token": unk_token, "cls_token": cls_token, "sep_token": sep_token, "pad_token": pad_token,
                 "mask_token": mask_token}
        names = {n: given[n] or self.family.specials[n] for n in SPECIAL_NAMES}
        self.unk_token, self.cls_token, self.sep_token = names["unk_token"], names["cls_token"], names["sep_token"]
        self.pad_token, self.mask_token = names["pad_token"], names["mask_token"]
        self.name_or_path = name_or_path
        self.model_max_length = int(model_max_length)
        self.settings = dict(settings or {})  # tokenizer_config.json as read: written back by save_pretrained
        self.sources = tuple(Path(p) for p in sources)
        try:
            ids = _special_ids(backend, names, Path(name_or_path or "tokenizer"))
        except CheckpointError as e:
            raise TokenizerError(str(e)) from None
        self.unk_token_id = ids["unk_token"]
        self.cls_token_id, self.sep_token_id = ids["cls_token"], ids["sep_token"]
        self.pad_token_id: int | None = ids["pad_token"]
        self.mask_token_id = ids["mask_token"] if ids["mask_token"] is not None else self.unk_token_id
        self.all_special_ids = frozenset(i for i in ids.values() if i is not None)
        self.vocab: dict[str, int] = backend.get_vocab(with_added_tokens=True)
        self.ids_to_tokens: dict[int, str] = {i: t for t, i in self.vocab.items()}
        types = self.family.token_types
        self._set_layouts(_layout(backend, False, types), _layout(backend, True, types))
        # A byte-level BPE without a prefix space reads a word alone as the start of a text ("Paris", not
        # "ĠParis"): a word of a sentence gets the space it has there (transformers' add_prefix_space=True).
        pre = json.loads(backend.pre_tokenizer.__getstate__()) if backend.pre_tokenizer is not None else {}
        self._word_prefix = " " if pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space") else ""

    def __repr__(self) -> str:
        return f"FastTokenizer(family={self.family.name!r}, vocab_size={self.vocab_size})"

    # --- tokenization ------------------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        """The tokens of `text` (no special tokens added), as transformers' `tokenize`."""
        return self.backend.encode(self._check_text(text), add_special_tokens=False).tokens

    def _encodings(self, texts: list[str], pairs: list[str] | None, max_length: int | None, truncation: bool | str,
                   stride: int, add_special_tokens: bool, num_workers: int | None) -> list[Encoding]:
        """The backend encodes the batch with its special tokens in one call (`tokenizers` spreads it over its own
        threads, so `num_workers` is not used). An input that needs no cut is that encoding as it is; one that does
        is split back into its sequences, which `_assemble` cuts into windows."""
        encs = self.backend.encode_batch(texts if pairs is None else list(zip(texts, pairs)),
                                         add_special_tokens=add_special_tokens)
        limit = self.model_max_length if max_length is None else max_length
        # HF refuses a stride beyond a single text's room even where nothing is cut: _assemble says so.
        whole = not truncation or stride <= limit - (self.special_counts[0] if add_special_tokens else 0)
        out = []
        for e in encs:
            if not truncation or (whole and len(e) <= limit):
                types = e.type_ids if self.family.token_types else [0] * len(e)
                out.append(Encoding(e.ids, types, e.attention_mask, e.special_tokens_mask, e.offsets, e.word_ids,
                                    e.sequence_ids))
            else:
                out.append(self._assemble(*_sequences(e, pairs is not None), max_length, truncation, stride,
                                          add_special_tokens))
        return out

    def words(self, text: str) -> list[Word]:
        """The words the pre-tokenizer splits `text` into, each as it is in the text with its first character's
        index (so `basic.word_span` gives its place); characters the normaliser drops belong to no word."""
        e = self.backend.encode(self._check_text(text), add_special_tokens=False)
        spans: dict[int, list[int]] = {}
        for w, (start, end) in zip(e.word_ids, e.offsets):
            if w is None:
                continue
            span = spans.setdefault(w, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
        return [(text[a:b], a, None) for a, b in spans.values() if b > a]

    def encode_word(self, word: str) -> list[int]:
        """The ids of one word of a sentence given as words (NER's CoNLL words), as transformers encodes a word
        with is_split_into_words=True: a byte-level BPE word gets the space before it."""
        return self.backend.encode(self._word_prefix + word, add_special_tokens=False).ids

    # --- decoding ----------------------------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int] | Any, skip_special_tokens: bool = True,
               clean_up_tokenization_spaces: bool = False) -> str:
        """Text of token ids, by the backend's decoder (transformers' fast `decode`)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        text = self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return _cleanup(text, _TEXT_CLEANUP) if clean_up_tokenization_spaces else text

    # --- loading and saving ------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, family: Family | str | None = None,
                        **overrides: Any) -> "FastTokenizer":
        """A family's tokenizer folder: tokenizer.json, else the family's own files (`Family.files`), with
        tokenizer_config.json's settings and special tokens; `family` defaults to the one the folder names
        (`tokenizer_family`). Keyword arguments override tokenizer_config.json's keys."""
        folder = resolve_model_dir(path)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: no such tokenizer folder")
        name = family.name if isinstance(family, Family) else family or tokenizer_family(folder)
        if name not in FAMILIES:
            raise CheckpointError(f"{folder}: names no tokenizer family bertkit reads with tokenizers "
                                  f"({', '.join(FAMILIES)}); found {name!r}")
        fam = FAMILIES[name]
        settings = read_tokenizer_settings(folder)
        settings.update(overrides)
        names = {n: _token_name(settings.get(n)) or fam.specials[n] for n in SPECIAL_NAMES}
        tj = folder / "tokenizer.json"
        if tj.is_file():
            sources: list[Path] = []
            backend = _from_tokenizer_json(tj, settings)
        elif all((folder / f).is_file() for f in fam.files):
            sources = [folder / f for f in fam.files]
            if fam.files == ("vocab.txt",):
                backend = _from_vocab_txt(folder, settings, names)
            elif fam.files == ("vocab.json", "merges.txt"):
                backend = _from_vocab_merges(folder, settings, names)
            else:
                backend = _from_sentencepiece(sources[0], fam, settings, names)
        else:
            raise CheckpointError(f"{folder}: no tokenizer files for a {fam.name} tokenizer: expected tokenizer.json "
                                  f"or {' + '.join(fam.files)}")
        mml = settings.get("model_max_length")
        max_length = int(mml) if isinstance(mml, (int, float)) and 0 < mml < _NO_LIMIT else DEFAULT_MODEL_MAX_LENGTH
        try:
            return cls(backend, fam, **names, model_max_length=max_length, name_or_path=str(folder),
                       settings=settings, sources=sources)
        except TokenizerError as e:
            raise CheckpointError(f"{tj if tj.is_file() else folder}: {e}") from None

    def config(self) -> dict[str, Any]:
        """tokenizer_config.json: the folder's own settings, with the class transformers reads it with, the length
        and the special tokens."""
        out = {k: v for k, v in self.settings.items() if k != "added_tokens_decoder"}
        out.setdefault("tokenizer_class", self.family.classes[0])
        out["model_max_length"] = self.model_max_length
        for n in SPECIAL_NAMES:
            out[n] = getattr(self, n)
        return out

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json, each atomically, and a copy of
        the vocabulary files the tokenizer was read from (a SentencePiece model, vocab.json + merges.txt)."""
        folder = make_dir(folder)
        atomic_write_text(folder / "tokenizer.json", self.backend.to_str())
        atomic_write_json(folder / "tokenizer_config.json", self.config())
        atomic_write_json(folder / "special_tokens_map.json", {n: getattr(self, n) for n in SPECIAL_NAMES})
        for source in self.sources:
            target = folder / source.name
            if source.is_file() and not (target.exists() and os.path.samefile(source, target)):
                with atomic_path(target) as tmp:
                    shutil.copyfile(source, tmp)


def read_tokenizer_settings(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json's keys, with special_tokens_map.json's token names where the config has none."""
    settings: dict[str, Any] = {}
    stm = folder / "special_tokens_map.json"
    if stm.is_file():
        settings.update({n: v for n, v in read_json_object(stm).items() if n in SPECIAL_NAMES})
    tc = folder / "tokenizer_config.json"
    if tc.is_file():
        settings.update({k: v for k, v in read_json_object(tc).items() if v is not None})
    return settings
