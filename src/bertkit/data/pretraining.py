"""Pre-training instances: sentence pairs for next-sentence prediction (or RoBERTa's packed full sentences for
an MLM-only objective), and masked-LM masks.

The recipe is google-research/bert `create_pretraining_data.py` (`create_instances_from_document`,
`truncate_seq_pair`, `create_masked_lm_predictions`), on token ids instead of token strings. Deviations,
each deliberate:

* A random B comes from another document of the current chunk (streaming keeps only a chunk in memory);
  it is drawn uniformly among the *other* documents, where the reference retries 10 times and may still
  pick the same document of a tiny corpus.
* The masked count is 15% of the non-special tokens, `min(max_predictions, max(1, round(n * 0.15)))`,
  where the reference counts [CLS]/[SEP] in n.
* The random replacement token is drawn from the ordinary vocabulary (no [PAD]/[CLS]/[SEP]/[MASK]/[UNK]/
  [unusedN]); the reference draws from every vocabulary entry.
* Whole-word masking joins a `##` piece to the word only when it directly follows it.

* With `config.balanced_nsp` (the default), a chunk of a single sentence longer than the target also flips
  the IsNext coin, taking B from the following sentences, and a document's last sentence alone in a chunk
  makes no instance; the reference gives both a random B, which makes ~56% of real-text pairs random.

As in the reference, the short target length is drawn once per document pass, not per instance.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from bertkit.data.config import PretrainingDataConfig
from bertkit.errors import TokenizerError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclass(frozen=True)
class VocabInfo:
    """What masking needs to know about a vocabulary: special ids, `##` pieces, replacement candidates."""

    vocab_size: int
    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    continuation_ids: frozenset[int]  # ids of "##" pieces (for whole-word masking)
    random_ids: tuple[int, ...]  # ids a masked token may be replaced with

    @classmethod
    def from_vocab(cls, vocab: Mapping[str, int], source: str = "vocabulary") -> "VocabInfo":
        """Build from a token -> id mapping; a vocabulary without [PAD]/[CLS]/[SEP]/[MASK] is an error."""
        missing = [t for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]") if t not in vocab]
        if missing:
            raise TokenizerError(f"{source}: no {', '.join(missing)} token; BERT pre-training needs [PAD], [CLS], "
                                 "[SEP] and [MASK] (add them to vocab.txt or train the tokenizer with its special "
                                 "tokens)")
        special = set(SPECIAL_TOKENS)
        random_ids = tuple(sorted(i for t, i in vocab.items()
                                  if t not in special and not (t.startswith("[unused") and t.endswith("]"))))
        if not random_ids:
            raise TokenizerError(f"{source}: the vocabulary holds only special tokens")
        return cls(vocab_size=max(vocab.values()) + 1, pad_id=vocab["[PAD]"], cls_id=vocab["[CLS]"],
                   sep_id=vocab["[SEP]"], mask_id=vocab["[MASK]"],
                   continuation_ids=frozenset(i for t, i in vocab.items() if t.startswith("##")), random_ids=random_ids)

    @classmethod
    def from_vocab_file(cls, path: str) -> "VocabInfo":
        """Build from a vocab.txt (one token per line, id = line number)."""
        with open(path, encoding="utf-8") as f:
            vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
        return cls.from_vocab(vocab, source=str(path))

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids that are never masked."""
        return frozenset((self.pad_id, self.cls_id, self.sep_id))


@dataclass
class Instance:
    """One pre-training example, with where its segments came from (for tests and debugging)."""

    input_ids: list[int]  # [CLS] A [SEP] B [SEP]; masked already when masks are static
    a_length: int  # tokens of segment A including [CLS] and the first [SEP] (token_type_ids 0)
    is_random_next: bool
    masked_positions: list[int] = field(default_factory=list)
    masked_labels: list[int] = field(default_factory=list)  # original ids at masked_positions
    # provenance: document index in the chunk and [start, end) sentence ranges of A and B
    document: int = -1
    a_sentences: tuple[int, int] = (0, 0)
    b_document: int = -1
    b_sentences: tuple[int, int] = (0, 0)
    target_length: int = 0


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """Trim the pair in place to `max_num_tokens`, one token at a time from the longer side, from its front or
    back at random (the reference: "to add more randomness and avoid biases")."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def mask_tokens(tokens: Sequence[int], vocab: VocabInfo, rng: random.Random, masked_lm_prob: float = 0.15,
                max_predictions_per_seq: int = 20, whole_word_mask: bool = False, mask_token_prob: float = 0.8,
                random_token_prob: float = 0.1) -> tuple[list[int], list[int], list[int]]:
    """Choose masked-LM targets: returns (masked tokens, sorted positions, original ids at those positions).

    Predicts `min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))` of the n non-special tokens
    ([CLS], [SEP], [PAD] never); each becomes [MASK] with `mask_token_prob`, else a random token with
    `random_token_prob / (1 - mask_token_prob)`, else stays (paper section 3.1: 80/10/10).
    """
    special = (vocab.cls_id, vocab.sep_id, vocab.pad_id)
    groups: list[list[int]] = []
    for i, t in enumerate(tokens):
        if t in special:
            continue
        if whole_word_mask and groups and t in vocab.continuation_ids and groups[-1][-1] == i - 1:
            groups[-1].append(i)
        else:
            groups.append([i])
    n = sum(len(g) for g in groups)
    output = list(tokens)
    if n == 0:
        return output, [], []
    num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))
    rng.shuffle(groups)
    keep_share = (1.0 - mask_token_prob - random_token_prob) / (1.0 - mask_token_prob) if mask_token_prob < 1 else 0.0
    positions: list[int] = []
    for group in groups:
        if len(positions) >= num_to_predict:
            break
        if len(positions) + len(group) > num_to_predict:
            continue  # a whole word that does not fit: try a shorter one
        for i in group:
            if rng.random() < mask_token_prob:
                output[i] = vocab.mask_id
            elif rng.random() >= keep_share:
                output[i] = vocab.random_ids[rng.randint(0, len(vocab.random_ids) - 1)]
            positions.append(i)
    positions.sort()
    return output, positions, [tokens[i] for i in positions]


def create_instances_from_document(documents: Sequence[Sequence[Sequence[int]]], document_index: int,
                                   config: PretrainingDataConfig, vocab: VocabInfo, rng: random.Random,
                                   counts: Counter | None = None) -> list[Instance]:
    """All sentence-pair instances of one pass over `documents[document_index]` (a list of sentences of ids).

    Follows the reference: fill a chunk of whole sentences up to a target length; A = its first
    randint(1, len-1) sentences; B = the rest (IsNext) or, with probability `random_next_prob` (always for a
    one-sentence chunk), a span of another document, the unused sentences going back to the stream.
    Masks are drawn here unless `config.dynamic_masking`. `counts["unpaired_last_sentences"]` counts the
    one-sentence chunks at a document's end that made no instance (balanced_nsp only).
    """
    if len(documents) < 2:
        raise ValueError("a random next sentence needs at least two documents")
    document = documents[document_index]
    max_num_tokens = config.max_num_tokens
    target_seq_length = max_num_tokens
    if rng.random() < config.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances: list[Instance] = []
    chunk_start = 0  # sentence index where the current chunk starts
    current_length = 0
    i = 0
    while i < len(document):
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:
            chunk = document[chunk_start : i + 1]
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s]
            single = len(chunk) == 1
            if single and config.balanced_nsp:
                if i == len(document) - 1:
                    # A lone last sentence has no true continuation. Keeping it only when its coin says "random"
                    # would bias the random share upwards, so it makes no instance (it still serves as B).
                    if counts is not None:
                        counts["unpaired_last_sentences"] += 1
                    break
                is_random_next = rng.random() < config.random_next_prob
            else:
                is_random_next = single or rng.random() < config.random_next_prob
            if is_random_next:
                b_doc = rng.randint(0, len(documents) - 2)
                if b_doc >= document_index:
                    b_doc += 1  # uniform over the other documents
                b_start = rng.randint(0, len(documents[b_doc]) - 1)
                tokens_b, b_end = _take_sentences(documents[b_doc], b_start, target_seq_length - len(tokens_a))
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            elif single:  # balanced_nsp: B = the following sentences, up to the target length
                b_doc, b_start = document_index, i + 1
                tokens_b, b_end = _take_sentences(document, b_start, target_seq_length - len(tokens_a))
                i = b_end - 1
            else:
                tokens_b = [t for s in chunk[a_end:] for t in s]
                b_doc, b_start, b_end = document_index, chunk_start + a_end, chunk_start + len(chunk)
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            input_ids = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
            instance = Instance(input_ids, len(tokens_a) + 2, is_random_next, document=document_index,
                                a_sentences=(chunk_start, chunk_start + a_end), b_document=b_doc,
                                b_sentences=(b_start, b_end), target_length=target_seq_length)
            if not config.dynamic_masking:
                instance.input_ids, instance.masked_positions, instance.masked_labels = mask_tokens(
                    input_ids, vocab, rng, **config.mask_options())
            instances.append(instance)
            chunk_start = i + 1
            current_length = 0
        i += 1
    return instances


def _take_sentences(sentences: Sequence[Sequence[int]], start: int, target: int) -> tuple[list[int], int]:
    """The tokens of sentences[start:], up to the first sentence that brings them to `target`, and its end."""
    tokens: list[int] = []
    end = start
    for end in range(start, len(sentences)):
        tokens.extend(sentences[end])
        if len(tokens) >= target:
            break
    return tokens, end + 1


def create_full_sentence_instances(documents: Sequence[Sequence[Sequence[int]]], config: PretrainingDataConfig,
                                   vocab: VocabInfo, rng: random.Random) -> list[Instance]:
    """One pass of RoBERTa's FULL-SENTENCES packing (Liu et al. 2019, section 4.2) over shuffled documents.

    [CLS] + whole sentences read contiguously + [SEP], at most `max_length` tokens; the stream crosses
    document boundaries with one [SEP] between documents (dropped where an instance ends anyway). A sentence
    never straddles two instances, and every sentence token lands in exactly one instance. One segment, no
    next-sentence label. Masks are drawn here unless `config.dynamic_masking`.
    """
    room = config.max_length - 2  # less [CLS] and the closing [SEP]
    order = list(range(len(documents)))
    rng.shuffle(order)
    instances: list[Instance] = []
    current: list[int] = []
    first_document = -1

    def emit() -> None:
        nonlocal current
        while current and current[-1] == vocab.sep_id:
            current.pop()  # a document separator at the very end would double the closing [SEP]
        if current:
            input_ids = [vocab.cls_id, *current, vocab.sep_id]
            instance = Instance(input_ids=input_ids, a_length=len(input_ids), is_random_next=False,
                                document=first_document, target_length=config.max_length)
            if not config.dynamic_masking:
                instance.input_ids, instance.masked_positions, instance.masked_labels = mask_tokens(
                    input_ids, vocab, rng, **config.mask_options())
            instances.append(instance)
        current = []

    for d in order:
        for sentence in documents[d]:
            if len(current) + len(sentence) > room:
                emit()
            if not current:
                first_document = d
            current.extend(sentence[:room])
        if current:
            current.append(vocab.sep_id)  # document boundary
    emit()
    return instances


def create_instances(documents: Sequence[Sequence[Sequence[int]]], config: PretrainingDataConfig, vocab: VocabInfo,
                     rng: random.Random, counts: Counter | None = None) -> list[Instance]:
    """Every instance of a chunk: `dupe_factor` passes over all documents, then shuffled (as the reference)."""
    instances: list[Instance] = []
    for _ in range(config.dupe_factor):
        if config.instances == "full_sentences":
            instances.extend(create_full_sentence_instances(documents, config, vocab, rng))
            continue
        for d in range(len(documents)):
            instances.extend(create_instances_from_document(documents, d, config, vocab, rng, counts))
    rng.shuffle(instances)
    return instances
