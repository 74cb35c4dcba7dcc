"""The config of `bertkit embed` (`bertkit.jobs.embed.run(EmbedConfig)`), apart from the job, which imports the
encoder and torch's process group: the CLI builds the verb's options from it, and `bertkit embed --help` reads it
without torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.data.texts import FORMATS
from bertkit.dataclass_io import Config, field_of, spec
from bertkit.inference.options import DEFAULT_PRECISION, EncodeOptions
from bertkit.inference.vector_store import DTYPES


@dataclass
class EmbedConfig(Config):
    """One embedding run: `bertkit embed`'s options are generated from these fields."""

    input: str = spec("")
    """Text file, one text per line ('-' reads standard input), or JSONL/CSV/TSV/Parquet with a text field."""
    output: str = spec("")
    """A folder (shards + manifest.json, resumable), or a file ending in .npy (one matrix; also an existing file,
    FIFO or device)."""
    model: str = spec("")
    """Model folder (or a shipped model's name)."""
    pooling: str | None = field_of(EncodeOptions, "pooling", None)
    """Pooling mode (default: the folder's sentence-transformers setting, else mean)."""
    normalize: bool | None = None
    """L2-normalise every embedding (default: the folder's sentence-transformers setting, else no)."""
    batch_size: int = field_of(EncodeOptions, "batch_size", 32)
    """Texts per forward pass."""
    max_length: int | None = field_of(EncodeOptions, "max_length", None)
    """Truncate texts to this many tokens (default: the folder's, else the model's position limit)."""
    precision: str = field_of(EncodeOptions, "precision", DEFAULT_PRECISION)
    """auto: bf16 where this machine has bf16 matrix units (AVX512-BF16/AMX, a GPU), else fp32; int8 only when asked."""
    dtype: str = spec("float32", choices=DTYPES)
    """Stored dtype of the vectors: float32, or float16 (half the disk; computed in the precision above)."""
    format: str = spec("auto", choices=FORMATS)
    """Input format: auto (from the suffix: .jsonl, .csv, .tsv, .parquet, anything else plain text), or one of
    text, jsonl, csv, tsv, parquet."""
    text_field: str = spec("text")
    """JSONL/CSV/TSV/Parquet: the field (column) holding the text."""
    id_field: str | None = spec(None)
    """JSONL/CSV/TSV/Parquet: the field holding each row's id (default: the row's line number)."""
    shard_size: int = spec(10000, ge=1, le=10**8)
    """Rows per shard of a folder output (and per Encoder call): what a resume redoes at most."""
    device: str = field_of(EncodeOptions, "device", "auto")
    """auto (this process's GPU under torchrun, or the GPU, else CPU), cpu, cuda, cuda:N."""
    progress: bool = True
    """Show progress (texts/s and ETA; a line every few seconds when stderr is not a terminal)."""

    @property
    def source(self) -> str:
        """The input's name in messages ('<stdin>' for '-')."""
        return "<stdin>" if self.input == "-" else self.input

    @property
    def to_folder(self) -> bool:
        """Whether the output is a folder of shards: a name not ending in .npy that is a folder or nothing yet (an
        existing file, FIFO or device, /dev/stdout say, takes one matrix as it always did)."""
        path = Path(self.output)
        return not self.output.endswith(".npy") and (path.is_dir() or not (path.exists() or path.is_symlink()))
