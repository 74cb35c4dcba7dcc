"""BertTokenizer: basic tokenizer + WordPiece, encodings with offsets, truncation/overflow windows, padding, I/O.

Behaviour follows Hugging Face's `BertTokenizerFast` (the reference the parity tests compare against):
special tokens written in the text (`[SEP]`, `[MASK]`, ...) are matched case-sensitively in the raw text and kept
whole; offsets index the original, un-normalised text; overflow windows and their order are those of
`return_overflowing_tokens=True`.
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from bertkit.errors import CheckpointError, TokenizerError
from bertkit.io import atomic_write_json, atomic_write_text, make_dir, read_json_object
from bertkit.pretrained import resolve_model_dir
from bertkit.tokenizer.basic import ASCII_CONTROL_RE, ASCII_WORD_RE, Word, split_words
from bertkit.tokenizer.families import SPECIAL_NAMES, tokenizer_family
from bertkit.tokenizer.wordpiece import MAX_INPUT_CHARS_PER_WORD, WordPiece

SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
DEFAULT_MODEL_MAX_LENGTH = 512
# Above this, a folder's model_max_length is transformers' "no limit" placeholder (int(1e30)).
_NO_LIMIT = 10**9
# With the word cache, one process already beats the Rust tokenizer's 2-thread batch on 2 cores, and shipping the
# results back from workers (pickling millions of small tuples) costs about what it saves
# (docs/results/tokenizer-epyc-avx2-2026-11-21.md), so workers are opt-in.

# One tokenized sequence before special tokens: ids, offsets and word indices, aligned.
Sequence_ = tuple[list[int], list[tuple[int, int]], list[int]]


@dataclass(slots=True)
class Encoding:
    """One model input: ids plus what is needed to map tokens back to words and characters.

    `offsets` are (start, end) character positions in the original text of the token's sequence ((0, 0) for
    special and padding tokens); `word_ids` number the words of each sequence from 0; `sequence_ids` say which
    input (0 or 1) each token came from (None for special/padding tokens). `overflowing` holds the further
    windows of an input longer than max_length when they were asked for.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    special_tokens_mask: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]
    sequence_ids: list[int | None]
    overflowing: list["Encoding"] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    def pad(self, length: int, pad_id: int) -> None:
        """Pad on the right to `length` tokens (no-op if already that long)."""
        n = length - len(self.input_ids)
        if n <= 0:
            return
        self.input_ids += [pad_id] * n
        self.token_type_ids += [0] * n
        self.attention_mask += [0] * n
        self.special_tokens_mask += [1] * n
        self.offsets += [(0, 0)] * n
        self.word_ids += [None] * n
        self.sequence_ids += [None] * n


class BatchEncoding:
    """Encodings of a batch. With overflow windows, `overflow_to_sample_mapping[i]` is the input of encoding i."""

    def __init__(self, encodings: list[Encoding], overflow_to_sample_mapping: list[int], pad_token_id: int) -> None:
        self.encodings = encodings
        self.overflow_to_sample_mapping = overflow_to_sample_mapping
        self.pad_token_id = pad_token_id

    def __len__(self) -> int:
        return len(self.encodings)

    def __iter__(self):
        return iter(self.encodings)

    def __getitem__(self, key: int | str) -> Any:
        """An Encoding by index, or one field for the whole batch by name (e.g. batch['input_ids'])."""
        if isinstance(key, str):
            if key == "overflow_to_sample_mapping":
                return self.overflow_to_sample_mapping
            if key not in Encoding.__dataclass_fields__ or key == "overflowing":
                raise KeyError(key)
            return [getattr(e, key) for e in self.encodings]
        return self.encodings[key]

    def to_tensors(self, pad_to_multiple_of: int | None = None) -> dict[str, Any]:
        """input_ids, token_type_ids and attention_mask as (batch, seq) int64 tensors, padded to the longest."""
        import numpy as np
        import torch

        length = max((len(e) for e in self.encodings), default=0)
        if pad_to_multiple_of:
            length = _round_up(length, pad_to_multiple_of)
        out = {}
        _check_pad(self.pad_token_id, "[PAD]", [len(e) for e in self.encodings], length)
        for name, pad in (("input_ids", self.pad_token_id or 0), ("token_type_ids", 0), ("attention_mask", 0)):
            arr = np.full((len(self.encodings), length), pad, dtype=np.int64)
            for i, e in enumerate(self.encodings):
                row = getattr(e, name)
                arr[i, : len(row)] = row
            out[name] = torch.from_numpy(arr)
        return out


def _check_pad(pad_token_id: int | None, pad_token: str, lengths: list[int], length: int) -> None:
    """Padding to `length` needs a pad id: a clear error when the vocabulary has none and padding is needed."""
    if pad_token_id is None and any(n < length for n in lengths):
        raise TokenizerError(f"the vocabulary has no {pad_token} token, so these encodings of different lengths cannot "
                             f"be padded; add {pad_token} to vocab.txt or encode without padding")


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _windows(n: int, max_len: int, stride: int) -> list[tuple[int, int]]:
    """Spans of the windows a sequence of n tokens is cut into: max_len tokens each, consecutive windows
    overlapping by `stride` tokens (HF `Encoding.truncate`); the last window ends at n."""
    if max_len >= n:
        return [(0, n)]
    if max_len == 0:
        return [(0, 0), (0, n)]
    if stride >= max_len:
        raise TokenizerError(f"stride {stride} must be smaller than the room left for the truncated sequence "
                             f"({max_len} tokens)")
    spans = []
    start = 0
    while True:
        stop = min(start + max_len, n)
        spans.append((start, stop))
        if stop == n:
            return spans
        start += max_len - stride


def _truncation_lengths(n1: int, n2: int | None, room: int, strategy: str) -> tuple[int, int | None]:
    """How many tokens of each sequence to keep per window (HF `truncate_encodings`)."""
    if room == 0:  # HF empties both sequences (every token goes to the overflow), whatever the strategy
        return 0, (0 if n2 is not None else None)
    total = n1 + (n2 or 0)
    if total <= room:
        return n1, n2
    to_remove = total - room
    if strategy == "longest_first":
        if n2 is None:
            return room, None
        short = min(n1, n2)
        long_ = short if short > room else max(short, room - short)
        if short + long_ > room:
            short = room // 2
            long_ = short + room % 2
        return (short, long_) if n1 <= n2 else (long_, short)
    if strategy == "only_first":
        if n1 <= to_remove:
            raise TokenizerError(f"cannot truncate the first sequence ({n1} tokens) to fit max_length: {to_remove} "
                                 "must go")
        return n1 - to_remove, n2
    if strategy == "only_second":
        if n2 is None:
            raise TokenizerError("truncation='only_second' needs a pair of sequences")
        if n2 <= to_remove:
            raise TokenizerError(f"cannot truncate the second sequence ({n2} tokens) to fit max_length: {to_remove} "
                                 "must go")
        return n1, n2 - to_remove
    raise TokenizerError(f"truncation must be True, False, 'longest_first', 'only_first' or 'only_second', "
                         f"got {strategy!r}")


def _cleanup(text: str, rules: tuple[tuple[str, str], ...]) -> str:
    for old, new in rules:
        text = text.replace(old, new)
    return text


# Hugging Face tokenizers' WordPiece decoder applies these to each token as it joins them.
_DECODER_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                    (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))
# transformers' clean_up_tokenization, applied to the whole text when clean_up_tokenization_spaces=True.
_TEXT_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


# ------------------------------------------------------------------------------------------------------------------
# Vocabulary files
# ------------------------------------------------------------------------------------------------------------------


def read_utf8(path: Path, error: type[Exception], missing: str = "no such file") -> str:
    """The text of a UTF-8 file; `error` (naming the file) when it is absent or not UTF-8."""
    if not path.is_file():
        raise error(f"{path}: {missing}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text ({e})") from None


def load_vocab(path: str | os.PathLike) -> dict[str, int]:
    """Read vocab.txt (one token per line; the line number is the id), refusing empty or duplicate tokens."""
    path = Path(path)
    text = read_utf8(path, CheckpointError, "vocabulary file not found (expected vocab.txt, one token per line)")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    vocab: dict[str, int] = {}
    for i, line in enumerate(lines):
        token = line.rstrip("\r")
        if not token:
            raise CheckpointError(f"{path}:{i + 1}: empty token (every line must hold one token)")
        if token in vocab:
            raise CheckpointError(f"{path}:{i + 1}: duplicate token {token!r} (first on line {vocab[token] + 1})")
        vocab[token] = i
    if not vocab:
        raise CheckpointError(f"{path}: the vocabulary is empty")
    return vocab


def _token_name(value: Any) -> str | None:
    """A special token as tokenizer_config.json spells it: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


# ------------------------------------------------------------------------------------------------------------------
# The tokenizer
# ------------------------------------------------------------------------------------------------------------------


# Special tokens around a window: ids and token type ids before A, A's type, between A and B, B's type, after.
Layout = tuple[list[int], list[int], int, list[int], list[int], int, list[int], list[int]]


class TokenizerBase:
    """What every bertkit tokenizer shares: encoding one text or a batch into `Encoding`s, truncation into HF's
    overflow windows, padding. A subclass gives `_encode_text` (a text's ids, offsets and word indices, no special
    tokens) and the `_single` and `_pair` layouts of its special tokens, so the windows, their order and their
    special tokens are computed here once for every tokenizer."""

    vocab: dict[str, int]
    ids_to_tokens: dict[int, str]
    unk_token_id: int
    model_max_length: int
    pad_token: str
    pad_token_id: int | None
    _single: Layout
    _pair: Layout
    special_counts: tuple[int, int]

    # --- sizes and lookups -----------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Ids of tokens (unknown tokens map to the unknown token's id)."""
        if isinstance(tokens, str):
            return self.vocab.get(tokens, self.unk_token_id)
        get, unk = self.vocab.get, self.unk_token_id
        return [get(t, unk) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        """Tokens of ids."""
        if isinstance(ids, int):
            return self.ids_to_tokens[ids]
        return [self.ids_to_tokens[int(i)] for i in ids]

    def _set_layouts(self, single: Layout, pair: Layout) -> None:
        """The special tokens around one sequence and around a pair; `special_counts` counts them (BERT: 2 and 3)."""
        self._single, self._pair = single, pair
        self.special_counts = tuple(len(lay[0]) + len(lay[3]) + len(lay[6]) for lay in (single, pair))  # type: ignore

    def _encode_text(self, text: str) -> Sequence_:
        raise NotImplementedError

    # --- encoding ----------------------------------------------------------------------------------------------------
    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               truncation: bool | str = True, padding: bool | str = False, pad_to_multiple_of: int | None = None,
               stride: int = 0, return_overflowing: bool = False, add_special_tokens: bool = True) -> Encoding:
        """Encode one text (or a pair) with the model's special tokens (BERT: `[CLS] A [SEP] (B [SEP])`).

        `max_length` (default: model_max_length) bounds every window when `truncation` is on. Truncation
        strategies are HF's: 'longest_first' (True), 'only_first', 'only_second'. `stride` is the OVERLAP, in
        tokens, between consecutive windows of the truncated sequence (HF's `stride` with
        `return_overflowing_tokens=True`); with `return_overflowing` the later windows are in `.overflowing`.
        `padding`: False, 'longest' (True; a no-op for one input besides pad_to_multiple_of) or 'max_length'.
        """
        a = self._check_text(text)
        b = self._check_text(pair) if pair is not None else None
        enc = self._encodings([a], [b] if b is not None else None, max_length, truncation, stride,
                              add_special_tokens, None)[0]
        if not return_overflowing:
            enc.overflowing = []
        self._pad([enc, *enc.overflowing], padding, max_length, pad_to_multiple_of)
        return enc

    def __call__(self, texts: Sequence[str] | str, pairs: Sequence[str] | str | None = None,
                 max_length: int | None = None, truncation: bool | str = True, padding: bool | str = False,
                 pad_to_multiple_of: int | None = None, stride: int = 0, return_overflowing: bool = False,
                 add_special_tokens: bool = True, num_workers: int | None = None) -> BatchEncoding:
        """Encode a batch (same options as `encode`). Overflow windows, when asked for, become encodings of their
        own, in order, with `overflow_to_sample_mapping`. `padding=True`/'longest' pads to the batch's longest.

        `num_workers`: processes to tokenize with (default 1; worth trying only for very large batches).
        """
        if isinstance(texts, str):
            texts = [texts]
        if isinstance(pairs, str):
            pairs = [pairs]
        if pairs is not None and len(pairs) != len(texts):
            raise TokenizerError(f"got {len(texts)} texts but {len(pairs)} pairs")
        # Millions of small tuples and lists, none in a reference cycle: the cyclic GC would only rescan them.
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            firsts = self._encodings([self._check_text(t) for t in texts],
                                     [self._check_text(t) for t in pairs] if pairs is not None else None,
                                     max_length, truncation, stride, add_special_tokens, num_workers)
            encodings: list[Encoding] = []
            mapping: list[int] = []
            for i, enc in enumerate(firsts):
                encodings.append(enc)
                mapping.append(i)
                if return_overflowing and enc.overflowing:
                    encodings += enc.overflowing
                    mapping += [i] * len(enc.overflowing)
                enc.overflowing = []
            self._pad(encodings, padding, max_length, pad_to_multiple_of)
        finally:
            if gc_enabled:
                gc.enable()
        return BatchEncoding(encodings, mapping, self.pad_token_id)

    def _encodings(self, texts: list[str], pairs: list[str] | None, max_length: int | None, truncation: bool | str,
                   stride: int, add_special_tokens: bool, num_workers: int | None) -> list[Encoding]:
        """Each input's first window, its later windows in `.overflowing`: its tokens (`_encode_many`) cut and
        given their special tokens (`_assemble`)."""
        a_seqs = self._encode_many(texts, num_workers)
        b_seqs = self._encode_many(pairs, num_workers) if pairs is not None else None
        return [self._assemble(a, b_seqs[i] if b_seqs is not None else None, max_length, truncation, stride,
                               add_special_tokens) for i, a in enumerate(a_seqs)]

    def _encode_many(self, texts: list[str], num_workers: int | None) -> list[Sequence_]:
        """`_encode_text` over a list, in worker processes when the batch is large."""
        num_workers = num_workers or 1
        if num_workers <= 1 or len(texts) < 2 * num_workers:
            encode = self._encode_text
            return [encode(t) for t in texts]
        from bertkit.tokenizer._parallel import encode_parallel

        return encode_parallel(self, texts, num_workers)

    @staticmethod
    def _check_text(text: Any) -> str:
        if not isinstance(text, str):
            raise TokenizerError(f"texts must be strings, got {type(text).__name__}")
        return text

    def _assemble(self, a: Sequence_, b: Sequence_ | None, max_length: int | None, truncation: bool | str,
                  stride: int, add_special_tokens: bool) -> Encoding:
        """Truncate into windows and add special tokens; the first window is the encoding, the rest overflowing."""
        strategy = "longest_first" if truncation is True else truncation
        n_special = self.special_counts[b is not None] if add_special_tokens else 0
        la, lb = len(a[0]), (len(b[0]) if b is not None else None)
        if strategy:
            limit = self.model_max_length if max_length is None else max_length
            room = limit - n_special
            if room < 0:
                raise TokenizerError(f"max_length {limit} leaves no room beside {n_special} special tokens")
            # HF refuses a stride beyond the room of a single sequence, even for pairs that need no cut.
            if stride > limit - (self.special_counts[0] if add_special_tokens else 0):
                raise TokenizerError(f"stride {stride} is larger than max_length {limit} minus the special tokens")
            ka, kb = _truncation_lengths(la, lb, room, strategy)
            wa = _windows(la, ka, stride)
            wb = _windows(lb, kb, stride) if b is not None else [None]  # type: ignore[arg-type]
        else:
            wa, wb = [(0, la)], [(0, lb)] if b is not None else [None]
        # HF's order: the first windows of both; then each later window of A with every window of B;
        # then the first window of A with the later windows of B.
        combos = [(wa[0], wb[0])]
        for sa in wa[1:]:
            combos += [(sa, sb) for sb in wb]
        combos += [(wa[0], sb) for sb in wb[1:]]
        encs = [self._build(a, sa, b, sb, add_special_tokens) for sa, sb in combos]
        encs[0].overflowing = encs[1:]
        return encs[0]

    def _build(self, a: Sequence_, sa: tuple[int, int], b: Sequence_ | None, sb: tuple[int, int] | None,
               special: bool) -> Encoding:
        """One window: the special tokens of the layout around A[sa] (and B[sb]); BERT's `[CLS] A [SEP] (B [SEP])`."""
        pre, pre_t, type_a, mid, mid_t, type_b, post, post_t = self._pair if b is not None else self._single
        if not special:
            pre = pre_t = mid = mid_t = post = post_t = []
        ids_a, off_a, w_a = a[0][sa[0]:sa[1]], a[1][sa[0]:sa[1]], a[2][sa[0]:sa[1]]
        la, lp, lm = len(ids_a), len(pre), len(mid)
        ids = [*pre, *ids_a, *mid]
        types = [*pre_t, *[type_a] * la, *mid_t]
        offsets = [*[(0, 0)] * lp, *off_a, *[(0, 0)] * lm]
        word_ids: list[int | None] = [*[None] * lp, *w_a, *[None] * lm]
        seq_ids: list[int | None] = [*[None] * lp, *[0] * la, *[None] * lm]
        special_mask = [*[1] * lp, *[0] * la, *[1] * lm]
        if b is not None and sb is not None:
            lb = sb[1] - sb[0]
            ids += b[0][sb[0]:sb[1]]
            types += [type_b] * lb
            offsets += b[1][sb[0]:sb[1]]
            word_ids += b[2][sb[0]:sb[1]]
            seq_ids += [1] * lb
            special_mask += [0] * lb
        n = len(post)
        ids += post
        types += post_t
        offsets += [(0, 0)] * n
        word_ids += [None] * n
        seq_ids += [None] * n
        special_mask += [1] * n
        return Encoding(ids, types, [1] * len(ids), special_mask, offsets, word_ids, seq_ids)

    def _pad(self, encodings: list[Encoding], padding: bool | str, max_length: int | None,
             multiple: int | None) -> None:
        """Pad in place: 'longest' (or True) to the longest encoding, 'max_length' to max_length."""
        if not padding or not encodings:
            return
        if padding is True or padding == "longest":
            length = max(len(e) for e in encodings)
        elif padding == "max_length":
            length = self.model_max_length if max_length is None else max_length
        else:
            raise TokenizerError(f"padding must be False, True, 'longest' or 'max_length', got {padding!r}")
        if multiple:
            length = _round_up(length, multiple)
        _check_pad(self.pad_token_id, self.pad_token, [len(e) for e in encodings], length)
        for e in encodings:
            e.pad(length, self.pad_token_id)


class BertTokenizer(TokenizerBase):
    """BERT's uncased/cased WordPiece tokenizer.

    `vocab` maps token -> id (or is a list of tokens in id order). `strip_accents=None` follows `lowercase`.
    `never_split` tokens (by default the special tokens) are recognised in the raw text and kept whole.
    """

    def __init__(self, vocab: dict[str, int] | Sequence[str], lowercase: bool = True,
                 strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
                 never_split: Iterable[str] | None = None, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
                 unk_token: str = "[UNK]", cls_token: str = "[CLS]", sep_token: str = "[SEP]",
                 pad_token: str = "[PAD]", mask_token: str = "[MASK]", name_or_path: str = "") -> None:
        if not isinstance(vocab, dict):
            vocab = {t: i for i, t in enumerate(vocab)}
        if not vocab:
            raise TokenizerError(f"{name_or_path or 'vocabulary'}: the vocabulary is empty")
        self.vocab: dict[str, int] = dict(vocab)
        self.ids_to_tokens: dict[int, str] = {i: t for t, i in self.vocab.items()}
        self.name_or_path = name_or_path
        self.lowercase = bool(lowercase)
        self.strip_accents = strip_accents
        self._strip = self.lowercase if strip_accents is None else bool(strip_accents)
        self.tokenize_chinese_chars = bool(tokenize_chinese_chars)
        self.model_max_length = int(model_max_length)
        self.unk_token, self.cls_token, self.sep_token = unk_token, cls_token, sep_token
        self.pad_token, self.mask_token = pad_token, mask_token
        specials = {n: getattr(self, n) for n in SPECIAL_NAMES}
        # [MASK] is only needed for masked LM and [PAD] only for padding (google-research/bert's own test
        # vocabulary has no [PAD]); the others are part of every encoding.
        missing = [t for t in specials.values() if t not in self.vocab and t not in (mask_token, pad_token)]
        if missing:
            raise TokenizerError(f"{name_or_path or 'vocabulary'}: special token(s) {', '.join(missing)} missing from "
                                 "the vocabulary")
        self.unk_token_id = self.vocab[unk_token]
        self.cls_token_id = self.vocab[cls_token]
        self.sep_token_id = self.vocab[sep_token]
        self.pad_token_id: int | None = self.vocab.get(pad_token)
        self.mask_token_id = self.vocab.get(mask_token, self.unk_token_id)
        self.all_special_ids = frozenset(self.vocab[t] for t in specials.values() if t in self.vocab)
        self.never_split = tuple(never_split) if never_split is not None else tuple(
            t for t in specials.values() if t in self.vocab)
        self._never_split_ids = {t: self.vocab.get(t, self.unk_token_id) for t in self.never_split}
        self._special_re = (re.compile("|".join(re.escape(t) for t in sorted(self.never_split, key=len, reverse=True)))
                            if self.never_split else None)
        self.wordpiece = WordPiece(self.vocab, unk_token, MAX_INPUT_CHARS_PER_WORD)
        cls, sep = [self.cls_token_id], [self.sep_token_id]
        self._set_layouts((cls, [0], 0, sep, [0], 0, [], []), (cls, [0], 0, sep, [0], 1, sep, [1]))

    # --- sizes and lookups -----------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"BertTokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase}, "
                f"strip_accents={self.strip_accents}, tokenize_chinese_chars={self.tokenize_chinese_chars})")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["wordpiece"] = WordPiece(self.vocab, self.unk_token, MAX_INPUT_CHARS_PER_WORD)  # without its cache
        return state

    # --- tokenization ------------------------------------------------------------------------------------------------
    def words(self, text: str) -> list[Word]:
        """The basic tokenizer's words of `text` with their original character positions.

        A word's third field is its characters' original positions (None when it is an unchanged slice of the
        text), or False for a special token found in the text.
        """
        special = self._special_re
        if special is None or not special.search(text):
            return split_words(text, self.lowercase, self._strip, self.tokenize_chinese_chars)
        out: list[Word] = []
        last = 0
        for m in special.finditer(text):
            out += split_words(text[last:m.start()], self.lowercase, self._strip, self.tokenize_chinese_chars, last)
            out.append((m.group(), m.start(), False))  # type: ignore[arg-type]
            last = m.end()
        out += split_words(text[last:], self.lowercase, self._strip, self.tokenize_chinese_chars, last)
        return out

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of `text` (no special tokens added)."""
        inv = self.ids_to_tokens
        return [inv[i] for i in self._encode_text(text)[0]]

    def encode_word(self, word: str) -> list[int]:
        """The ids of one word of a sentence given as words (NER's CoNLL words): its WordPiece ids."""
        return self._encode_text(word)[0]

    def _encode_text(self, text: str) -> Sequence_:
        """Ids, original-text offsets and word indices of one text's tokens: the hot path."""
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        word_ids: list[int] = []
        wp_cache = self.wordpiece.cache
        wp_encode = self.wordpiece.encode
        special = self._special_re
        if text.isascii() and not ASCII_CONTROL_RE.search(text) and (special is None or not special.search(text)):
            # Fast path: no normalisation changes positions, so a word's pieces map to text[start + a: start + b].
            if self.lowercase:
                text = text.lower()
            w = 0
            for m in ASCII_WORD_RE.finditer(text):
                word = m.group()
                pieces = wp_cache.get(word) or wp_encode(word)
                pids = pieces[0]
                if len(pids) == 1:
                    ids.append(pids[0])
                    offsets.append(m.span())
                    word_ids.append(w)
                else:
                    s = m.start()
                    ids += pids
                    offsets += [(s + a, s + b) for a, b in pieces[1]]
                    word_ids += [w] * len(pids)
                w += 1
            return ids, offsets, word_ids
        for w, (word, start, pos) in enumerate(self.words(text)):
            if pos is False:
                ids.append(self._never_split_ids[word])
                offsets.append((start, start + len(word)))
                word_ids.append(w)
                continue
            pids, spans = wp_cache.get(word) or wp_encode(word)
            ids += pids
            if pos is None:
                offsets += [(start + a, start + b) for a, b in spans]
            else:
                offsets += [(pos[a], pos[b - 1] + 1) for a, b in spans]
            word_ids += [w] * len(pids)
        return ids, offsets, word_ids

    # --- decoding ----------------------------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int] | Any, skip_special_tokens: bool = True,
               clean_up_tokenization_spaces: bool = False) -> str:
        """Text of token ids: `##` pieces joined to the previous token, other tokens separated by spaces.

        Matches BertTokenizerFast.decode (its WordPiece decoder tidies spaces before . , ! ? and in contractions
        token by token); `clean_up_tokenization_spaces=True` also applies transformers' whole-text clean-up.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        inv = self.ids_to_tokens
        skip = self.all_special_ids if skip_special_tokens else frozenset()
        parts = []
        for i in ids:
            if i in skip:
                continue
            token = inv[int(i)]
            if parts:
                token = token[2:] if token.startswith("##") else " " + token
            parts.append(_cleanup(token, _DECODER_CLEANUP))
        text = "".join(parts)
        return _cleanup(text, _TEXT_CLEANUP) if clean_up_tokenization_spaces else text

    # --- loading and saving ------------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> "BertTokenizer":
        """Load a tokenizer folder (vocab.txt + tokenizer_config.json and/or tokenizer.json, as bertkit or
        Hugging Face write them), a bare vocab.txt, or a shipped model's name (bertkit.pretrained). Keyword
        arguments override the folder's settings."""
        path = resolve_model_dir(path)
        if path.is_file():
            return cls(load_vocab(path), name_or_path=str(path), **overrides)
        if not path.is_dir():
            raise CheckpointError(f"{path}: no such tokenizer folder or vocab file")
        settings: dict[str, Any] = {}
        vocab: dict[str, int] | None = None
        tj = path / "tokenizer.json"
        if tj.is_file():
            d = read_json_object(tj)
            norm = d.get("normalizer") or {}
            if isinstance(norm, dict) and norm.get("type") == "BertNormalizer":
                settings.update(lowercase=norm.get("lowercase", True), strip_accents=norm.get("strip_accents"),
                                tokenize_chinese_chars=norm.get("handle_chinese_chars", True))
            model = d.get("model") or {}
            if isinstance(model, dict) and model.get("type") == "WordPiece" and isinstance(model.get("vocab"), dict):
                vocab = {str(t): int(i) for t, i in model["vocab"].items()}
                settings["unk_token"] = model.get("unk_token", "[UNK]")
        tc = path / "tokenizer_config.json"
        if tc.is_file():
            d = read_json_object(tc)
            for key in ("do_lower_case", "lowercase"):
                if key in d:
                    settings["lowercase"] = bool(d[key])
            if "strip_accents" in d:
                settings["strip_accents"] = d["strip_accents"]
            if "tokenize_chinese_chars" in d:
                settings["tokenize_chinese_chars"] = bool(d["tokenize_chinese_chars"])
            mml = d.get("model_max_length")
            if isinstance(mml, (int, float)) and 0 < mml < _NO_LIMIT:
                settings["model_max_length"] = int(mml)
            for name in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"):
                token = _token_name(d.get(name))
                if token:
                    settings[name] = token
        if (path / "vocab.txt").is_file():
            vocab = load_vocab(path / "vocab.txt")
        elif vocab is None:
            family = tokenizer_family(path)
            raise CheckpointError(f"{path}: no vocab.txt (and no WordPiece vocabulary in a tokenizer.json)" + (
                f"; it holds a {family} tokenizer, which bertkit.tokenizer.load_tokenizer reads (BertTokenizer reads "
                "BERT's WordPiece only)" if family else ""))
        settings.update(overrides)
        try:
            return cls(vocab, name_or_path=str(path), **settings)
        except TokenizerError as e:
            raise CheckpointError(f"{path / 'vocab.txt'}: {e}") from None

    def config(self) -> dict[str, Any]:
        """tokenizer_config.json as bertkit and transformers both read it."""
        return {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "model_max_length": self.model_max_length,
            **{n: getattr(self, n) for n in SPECIAL_NAMES},
        }

    def _tokenizer_json(self) -> dict[str, Any]:
        """tokenizer.json in the Hugging Face tokenizers format, so transformers' fast tokenizer loads the folder."""
        specials = sorted(self.all_special_ids)
        tok = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": self.ids_to_tokens[i], **tok} for i in specials],
            "normalizer": {"type": "BertNormalizer", "clean_text": True,
                           "handle_chinese_chars": self.tokenize_chinese_chars,
                           "strip_accents": self.strip_accents, "lowercase": self.lowercase},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": self.cls_token, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": self.sep_token, "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": self.cls_token, "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": self.sep_token, "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": self.sep_token, "type_id": 1}}],
                "special_tokens": {t: {"id": t, "ids": [self.vocab[t]], "tokens": [t]}
                                   for t in (self.cls_token, self.sep_token)},
            },
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": self.unk_token, "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": MAX_INPUT_CHARS_PER_WORD, "vocab": self.vocab},
        }

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Write vocab.txt, tokenizer_config.json, special_tokens_map.json and tokenizer.json, each atomically."""
        folder = Path(folder)
        make_dir(folder)
        tokens = [self.ids_to_tokens[i] for i in sorted(self.ids_to_tokens)]
        if sorted(self.ids_to_tokens) != list(range(len(tokens))):
            raise TokenizerError("vocabulary ids are not 0..n-1; cannot be written as vocab.txt")
        atomic_write_text(folder / "vocab.txt", "".join(t + "\n" for t in tokens))
        atomic_write_json(folder / "tokenizer_config.json", self.config())
        atomic_write_json(folder / "special_tokens_map.json", {n: getattr(self, n) for n in SPECIAL_NAMES})
        atomic_write_json(folder / "tokenizer.json", self._tokenizer_json())
