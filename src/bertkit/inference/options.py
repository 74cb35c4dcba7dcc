"""The options of the inference verbs, each range declared once beside its field (bertkit.dataclass_io): the
command line's options are generated from these classes, and the functions that take the same values check them
against the same fields (`check_value`). Kept apart from the modules that compute, so that reading the options does
not load torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertkit.dataclass_io import DEVICE, Config, spec
from bertkit.errors import ConfigError
from bertkit.model.config import MAX_POSITIONS

ATTENTION_TOKENS = 64  # beyond this the token labels of an attention grid are unreadable
OPSET = 17  # the ONNX opset bertkit exports by default
# The precisions an Encoder computes in (bertkit.inference.precision resolves "auto").
PRECISIONS = ("auto", "fp32", "bf16", "int8")
DEFAULT_PRECISION = "auto"


def check_window(max_length: int, config: Any) -> int:
    """`max_length`, or a ConfigError when it is beyond the model's position window (its options' spec bounds
    every model; this, the one model at hand)."""
    if max_length > config.max_sequence_length:
        raise ConfigError(f"max_length {max_length} exceeds the {config.max_sequence_length} positions the model "
                          "has")
    return max_length


def _poolings() -> tuple[str, ...]:
    """The pooling modes' names (read when checked: bertkit.inference.pooling imports torch)."""
    from bertkit.inference.pooling import POOLINGS

    return tuple(POOLINGS)


@dataclass
class EncodeOptions(Config):
    """How texts become sentence embeddings: the options of `Encoder`, `bertkit.load(...).encode`, `bertkit embed`
    and the server's /embed, declared once."""

    pooling: str | None = spec(None, choices=_poolings)
    """Pooling mode (default: the folder's sentence-transformers setting, else mean)."""
    normalize: bool | None = None
    """L2-normalise every embedding (default: the folder's sentence-transformers setting, else no)."""
    batch_size: int = spec(32, ge=1, le=2**16)
    """Texts per forward pass."""
    max_length: int | None = spec(None, ge=2, le=MAX_POSITIONS)
    """Truncate texts to this many tokens, [CLS] and [SEP] included (default: the folder's, else the model's
    position limit)."""
    precision: str = spec(DEFAULT_PRECISION, choices=PRECISIONS)
    """auto: bf16 where this machine has bf16 matrix units (AVX512-BF16/AMX, a GPU), else fp32; int8 only when asked."""
    device: str = spec("auto", **DEVICE)
    """auto (this process's GPU under torchrun, or the GPU, else CPU), cpu, cuda, cuda:N."""


@dataclass
class FillMaskOptions(Config):
    """Fill-mask's option (`bertkit fill-mask --top-k`, `fill_mask(top_k=...)`, /fill-mask's top_k)."""

    top_k: int = spec(5, ge=1, le=1000)
    """Tokens given per mask token (the model's own: [MASK], <mask>), most probable first."""


@dataclass
class FeatureOptions(Config):
    """`extract_features`' sizes (`bertkit extract-features --max-length --batch-size`)."""

    max_length: int = spec(128, ge=3, le=MAX_POSITIONS)
    """Word pieces per sequence ([CLS] and [SEP] included)."""
    batch_size: int = spec(32, ge=1, le=2**16)
    """Lines per forward pass."""


@dataclass
class AttentionOptions(Config):
    """`attention_maps`' size (`bertkit attention --max-length`)."""

    max_length: int = spec(ATTENTION_TOKENS, ge=2, le=512, why="a grid of more tokens is unreadable")
    """Tokens drawn at most ([CLS] and [SEP] included)."""


@dataclass
class ExportOptions(Config):
    """The export's option (`bertkit export-onnx --opset`, `export_onnx(opset=...)`)."""

    opset: int = spec(OPSET, ge=14, le=23, why="torch's TorchScript exporter writes bertkit's attention "
                      "(scaled_dot_product_attention) from opset 14, and reaches 23")
    """ONNX opset version of the graph."""


@dataclass
class SemanticSearchOptions(Config):
    """In-memory semantic search's sizes (`bertkit.semantic_search`, as sentence-transformers' util.semantic_search
    names them; `Bert.rank`'s top_k)."""

    top_k: int = spec(10, ge=1, le=2**31 - 1)
    """Hits per query, best first (at most the corpus's size)."""
    query_chunk_size: int = spec(100, ge=1, le=2**20)
    """Queries scored at once."""
    corpus_chunk_size: int = spec(500_000, ge=1, le=2**31 - 1)
    """Corpus rows scored at once: with query_chunk_size, bounds the (queries x rows) scores held at once."""
