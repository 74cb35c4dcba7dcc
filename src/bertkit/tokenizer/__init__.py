"""BERT's tokenizer: basic tokenization, WordPiece, encodings with offsets, and WordPiece vocabulary training."""

from bertkit.tokenizer.basic import basic_tokenize
from bertkit.tokenizer.tokenizer import BatchEncoding, BertTokenizer, Encoding, load_vocab
from bertkit.tokenizer.wordpiece import WordPiece

__all__ = ["BatchEncoding", "BertTokenizer", "Encoding", "WordPiece", "basic_tokenize", "load_vocab"]
