"""Dynamic masked-LM masks for a whole padded batch at once: numpy array operations, no per-token Python.

The recipe is `bertkit.data.pretraining.mask_tokens`'s (which draws the static masks stored at preparation):
each sequence predicts exactly `min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))` of its n
non-special tokens ([CLS], [SEP], [PAD] never), chosen uniformly; with whole-word masking the unit is a word
(a piece and the `##` pieces directly after it), taken in random order, a word that no longer fits being skipped
for the next one (the reference's greedy rule, here run as a few rounds over the batch). Each predicted token
becomes [MASK] with `mask_token_prob`, a random ordinary token with `random_token_prob`, else stays (paper, 3.1).

The randomness is counter-based: every draw is splitmix64 (Steele et al. 2014) of (instance key, position,
stream), the instance key a function of (seed, epoch, dataset index). So an instance's mask depends on those
three only, not on the batch it lands in, its order, the DataLoader worker or the number of processes, and a
resumed run redraws exactly the masks it would have drawn, with no generator state to checkpoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from bertkit.data.pretraining import VocabInfo
from bertkit.errors import DataError

IGNORE_INDEX = -100
"""The label of positions no loss counts (torch cross-entropy's ignore_index): positions without a masked-LM target,
word pieces after a word's first in NER, padding. bertkit's one definition, in a module without torch so that the
tasks, which make labels, import without it; the model and the collators import it too."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ACTION_STREAM = 1 << 16  # counter offset of the replacement draws (positions are < 2**16: max_length <= 65535)
_POSITION_BITS = np.uint64(0xFFFF)
_NONE = np.uint64(np.iinfo(np.uint64).max)  # the sort key of a token that cannot be chosen


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic): a well-mixed hash of a counter."""
    return _mix_inplace(x + _GOLDEN)


def _mix_inplace(z: np.ndarray) -> np.ndarray:
    """splitmix64's mixing of `z` (uint64, already offset by the golden gamma), in place: no temporary arrays."""
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def instance_keys(seed: int, epoch: int, indices: np.ndarray) -> np.ndarray:
    """The random key of each instance in one epoch, (batch,) uint64: a pure function of (seed, epoch, index)."""
    digest = hashlib.sha256(f"bertkit-dynamic-mask:{seed}:{epoch}".encode()).digest()
    base = np.frombuffer(digest[:8], dtype="<u8").astype(np.uint64)
    return splitmix64(base + np.asarray(indices, dtype=np.int64).astype(np.uint64) * _GOLDEN)


def _draws(keys: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """64 random bits per (instance key, counter), broadcast together."""
    z = counters.astype(np.uint64) * _GOLDEN
    z = z + keys  # broadcast to the result's shape
    z += _GOLDEN
    return _mix_inplace(z)


@dataclass(frozen=True)
class MaskTables:
    """A vocabulary as masking reads it: lookup tables by token id."""

    special: np.ndarray  # (vocab,) bool: never predicted ([CLS], [SEP], [PAD])
    continuation: np.ndarray  # (vocab,) bool: "##" pieces (whole-word masking)
    random_ids: np.ndarray  # (candidates,) int64: ids a predicted token may be replaced with
    mask_id: int

    @classmethod
    def from_vocab(cls, vocab: VocabInfo) -> "MaskTables":
        """Build the tables once per collator."""
        special = np.zeros(vocab.vocab_size, dtype=bool)
        special[list(vocab.special_ids)] = True
        continuation = np.zeros(vocab.vocab_size, dtype=bool)
        continuation[list(vocab.continuation_ids)] = True
        return cls(special, continuation, np.asarray(vocab.random_ids, dtype=np.int64), vocab.mask_id)


def predictions_per_row(non_special: np.ndarray, masked_lm_prob: float, max_predictions_per_seq: int) -> np.ndarray:
    """How many tokens each sequence predicts: min(max, max(1, round(n * prob))), 0 without a non-special token.
    np.rint rounds half to even, as Python's round does in `mask_tokens`."""
    k = np.minimum(max_predictions_per_seq, np.maximum(1, np.rint(non_special * masked_lm_prob))).astype(np.int64)
    return np.where(non_special > 0, k, 0)


def _choose_tokens(keys: np.ndarray, candidate: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(batch, seq) bool: in each row the k[row] candidates of smallest key (a uniform draw without replacement)."""
    keys = np.where(candidate, keys, _NONE)
    kth = np.sort(keys, axis=1)[np.arange(len(k)), np.maximum(k - 1, 0)]
    return candidate & (keys <= kth[:, None]) & (k > 0)[:, None]


def _choose_words(row_keys: np.ndarray, ids: np.ndarray, candidate: np.ndarray, tables: MaskTables,
                  k: np.ndarray) -> np.ndarray:
    """(batch, seq) bool: whole words in random order, each taken while it fits the row's budget k (greedy)."""
    batch, width = ids.shape
    cols = np.arange(width)
    after_candidate = np.zeros_like(candidate)
    after_candidate[:, 1:] = candidate[:, :-1]
    starts = candidate & ~(tables.continuation[ids] & after_candidate)  # a word's first piece
    word = np.cumsum(starts.ravel()).reshape(batch, width) - 1  # word number in the batch, at its pieces
    word_flat = word.ravel()
    sizes = np.bincount(word[candidate], minlength=1)  # pieces per word
    n_words = starts.sum(1)
    # Sort key of a word: its random draw (from its row's key and its first piece's column) in the high bits, that
    # column in the low 16, so each row sorts its words into random order and the sorted keys say where each is.
    at = np.flatnonzero(starts)
    row, col = np.divmod(at, width)
    key = np.full((batch, width), _NONE)
    key.ravel()[at] = (_draws(row_keys[row], col) & ~_POSITION_BITS) | col.astype(np.uint64)
    key.sort(axis=1)  # a row's words first, in random order
    taken = np.zeros(len(sizes) + 1, dtype=bool)  # + 1: word -1 (none) is never taken
    remaining = k.copy()

    def view(rows: np.ndarray, upto: int) -> tuple[np.ndarray, ...]:
        """The first `upto` words of `rows` in random order: word number (-1: none), size, whether a word."""
        cand = cols[:upto] < n_words[rows, None]
        first = (key[rows, :upto] & _POSITION_BITS).astype(np.intp)
        np.minimum(first, width - 1, out=first)  # no word: any column, masked below
        first += (rows * width)[:, None]
        w = np.where(cand, word_flat[first], -1)
        size = sizes[w]
        size *= cand
        return w, size, cand

    def rounds(rows: np.ndarray, w: np.ndarray, size: np.ndarray, cand: np.ndarray) -> None:
        """Each round takes, per row, the longest run of the remaining words (in random order) that fits; the word
        after it is larger than what is left, so it drops out with every other word that no longer fits, and the
        next round goes on from there, as the greedy loop does. A row leaves when no word is left to try."""
        cand &= ~taken[w]
        cand &= size <= remaining[rows, None]
        while len(rows):
            fits = np.cumsum(size * cand, axis=1) <= remaining[rows, None]
            fits &= cand
            taken[w[fits]] = True
            remaining[rows] -= (size * fits).sum(1)
            cand &= ~fits
            cand &= size <= remaining[rows, None]
            more = cand.any(1)
            if not more.all():
                rows, w, size, cand = rows[more], w[more], size[more], cand[more]

    # The greedy loop rarely reads far down a row: first the leading k + 16 words of every row, then the whole of
    # the few rows that still have budget and words left. Exact: the first pass decides every word it reads.
    upto = min(width, int(k.max(initial=0)) + 16)
    every = np.arange(batch)
    rounds(every, *view(every, upto))
    rest = np.flatnonzero((remaining > 0) & (n_words > upto))
    if len(rest):
        rounds(rest, *view(rest, width))
    return candidate & taken[word]


def mask_batch(ids: np.ndarray, row_keys: np.ndarray, tables: MaskTables, masked_lm_prob: float = 0.15,
               max_predictions_per_seq: int = 20, whole_word_mask: bool = False, mask_token_prob: float = 0.8,
               random_token_prob: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Masked-LM inputs and targets of a padded batch: `ids` (batch, seq) int64 (padding = [PAD]) and each row's
    key (`instance_keys`) -> (masked ids, labels: the original id where predicted, IGNORE_INDEX elsewhere)."""
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= len(tables.special)):
        raise DataError(f"token id {int(ids.max()) if ids.max() >= len(tables.special) else int(ids.min())} is "
                        f"outside the vocabulary of {len(tables.special)} tokens: the data was prepared with another "
                        "tokenizer")
    candidate = ~tables.special[ids]
    k = predictions_per_row(candidate.sum(1), masked_lm_prob, max_predictions_per_seq)
    if whole_word_mask:
        chosen = _choose_words(row_keys, ids, candidate, tables, k)
    else:
        chosen = _choose_tokens(_draws(row_keys[:, None], np.arange(ids.shape[1])), candidate, k)
    labels = np.where(chosen, ids, IGNORE_INDEX)
    where = np.flatnonzero(chosen)
    originals = ids.ravel()[where]
    # One 64-bit draw per predicted token: the low 32 bits pick [MASK] / random / keep, the high 32 the random id.
    bits = _draws(row_keys[where // ids.shape[1]], where % ids.shape[1] + _ACTION_STREAM)
    action = bits & np.uint64(0xFFFFFFFF)
    to_mask = np.uint64(round(mask_token_prob * 2**32))
    to_random = to_mask + np.uint64(round(random_token_prob * 2**32))
    pick = ((bits >> np.uint64(32)) * np.uint64(len(tables.random_ids))) >> np.uint64(32)
    replaced = np.where(action < to_mask, tables.mask_id,
                        np.where(action < to_random, tables.random_ids[pick.astype(np.int64)], originals))
    out = ids.copy()
    out.ravel()[where] = replaced
    return out, labels
