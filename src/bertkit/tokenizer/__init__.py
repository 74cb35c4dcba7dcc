"""BERT's tokenizer (basic tokenization, WordPiece, encodings with offsets, WordPiece vocabulary training), the
family's tokenizers run by Hugging Face `tokenizers` (FastTokenizer), and `load_tokenizer`, which picks one by a
folder's files."""

from bertkit.tokenizer.auto import load_tokenizer
from bertkit.tokenizer.basic import basic_tokenize
from bertkit.tokenizer.fast import FastTokenizer
from bertkit.tokenizer.families import FAMILIES
from bertkit.tokenizer.tokenizer import BatchEncoding, BertTokenizer, Encoding, load_vocab
from bertkit.tokenizer.wordpiece import WordPiece

__all__ = ["FAMILIES", "BatchEncoding", "BertTokenizer", "Encoding", "FastTokenizer", "WordPiece", "basic_tokenize",
           "load_tokenizer", "load_vocab"]
