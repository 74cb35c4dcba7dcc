"""One family of errors for people: each names the file, line or field, what was found and what was expected."""

from __future__ import annotations


class BertkitError(Exception):
    """Base class of every error bertkit raises on purpose; the CLI prints its message without a traceback."""


class ConfigError(BertkitError):
    """A configuration field is missing, of the wrong type, or out of range."""


class CheckpointError(BertkitError):
    """A model or tokenizer folder is missing a file, or a file does not match what it should hold."""


class DataError(BertkitError):
    """An input data file is malformed (the message names the file and line)."""


class TokenizerError(BertkitError):
    """A vocabulary or tokenizer setting is invalid."""


class OutputError(BertkitError):
    """An output location cannot be written (a file or dangling link where a folder should go, no permission)."""


class TrainingError(BertkitError):
    """A training run cannot go on: its loss, gradients or weights stopped being finite numbers. The run stops
    before the bad update; its last checkpoint and best model stay as they were."""


class Interrupted(BertkitError):
    """A run stopped by SIGINT or SIGTERM after writing its checkpoint: it has no final result, and resuming it
    continues exactly where it stopped. `signal` is the signal's number (the CLI exits with 128 + signal)."""

    def __init__(self, message: str, signal: int) -> None:
        super().__init__(message)
        self.signal = signal


def data_error(path: object, line: int | None, message: str) -> DataError:
    """Build a DataError whose message starts with 'path:line:' like a compiler's."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return DataError(f"{where}: {message}")
