"""WordPiece: split one word into vocabulary pieces, greedy longest-match-first, with `##` continuations."""

from __future__ import annotations

# A word longer than this (in characters, after normalisation) becomes one [UNK], as in BERT.
MAX_INPUT_CHARS_PER_WORD = 100
CONTINUATION_PREFIX = "##"

# Pieces of one word: their ids, and the (start, end) character span of each inside the word.
Pieces = tuple[tuple[int, ...], tuple[tuple[int, int], ...]]


class WordPiece:
    """Greedy longest-match-first WordPiece over a fixed vocabulary, with a per-word cache.

    A word that cannot be covered completely by vocabulary pieces, or that is longer than
    `max_input_chars_per_word`, becomes a single unknown token spanning the whole word.
    """

    def __init__(
        self,
        vocab: dict[str, int],
        unk_token: str = "[UNK]",
        max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
        prefix: str = CONTINUATION_PREFIX,
        cache_size: int = 1_000_000,
    ) -> None:
        self.vocab = vocab
        self.unk_token = unk_token
        self.unk_id = vocab[unk_token]
        self.max_chars = max_input_chars_per_word
        self.prefix = prefix
        # The longest match worth trying at each position (bounds the inner loop to the longest vocab entry).
        self.max_piece_len = max((len(t) for t in vocab), default=1)
        self.cache_size = cache_size
        self.cache: dict[str, Pieces] = {}

    def tokenize(self, word: str) -> list[str]:
        """The pieces of `word` as strings (e.g. 'unaffable' -> ['un', '##aff', '##able'])."""
        ids, spans = self.encode(word)
        if ids == (self.unk_id,):
            return [self.unk_token]
        return [word[a:b] if k == 0 else self.prefix + word[a:b] for k, (a, b) in enumerate(spans)]

    def encode(self, word: str) -> Pieces:
        """Ids and in-word character spans of the pieces of `word` (cached)."""
        hit = self.cache.get(word)
        if hit is not None:
            return hit
        pieces = self._split(word)
        if len(self.cache) >= self.cache_size:
            self.cache.clear()  # bounded memory; a cleared cache refills with the frequent words first
        self.cache[word] = pieces
        return pieces

    def _split(self, word: str) -> Pieces:
        """Greedy longest-match-first segmentation of one word."""
        n = len(word)
        if n > self.max_chars:
            return (self.unk_id,), ((0, n),)
        vocab, prefix, longest = self.vocab, self.prefix, self.max_piece_len
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        start = 0
        while start < n:
            end = min(n, start + (longest if start == 0 else longest - len(prefix)))
            found = None
            while end > start:
                piece = word[start:end] if start == 0 else prefix + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return (self.unk_id,), ((0, n),)
            ids.append(found)
            spans.append((start, end))
            start = end
        return tuple(ids), tuple(spans)
