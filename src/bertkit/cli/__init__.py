"""The `bertkit` command: one verb per job, each defined in a module of this package.

`VERBS` names every verb, the module that defines it and its one-line help. Only the verb being run is built (its
module's `register(subparsers)` adds it), so `bertkit --help` imports no verb's dependencies. A handler takes the
parsed `argparse.Namespace` and returns an exit code (or None for 0).

Help is compact: one spelling per option with its type, default and first sentence (`--help-all` and
docs/reference/cli.md give the whole text). A misspelt verb or option is answered with the nearest names.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import shutil
import sys
import traceback
from typing import Any

from bertkit.errors import BertkitError, Interrupted

# In the order `bertkit --help` lists them: following the data's path.
VERBS: dict[str, tuple[str, str]] = {
    "tokenize": ("bertkit.cli.tokenize", "tokenize text lines into JSON (ids, token types, offsets)"),
    "train-tokenizer": ("bertkit.cli.tokenize", "train a WordPiece vocabulary and write a tokenizer folder"),
    "info": ("bertkit.cli.model", "show a model folder's config, size, vocabulary and head"),
    "convert": ("bertkit.cli.model", "import a Hugging Face BERT folder, or export one transformers loads"),
    "prepare-pretraining": ("bertkit.cli.data", "turn text files into sharded pre-training instances"),
    "pretrain": ("bertkit.cli.pretrain", "pre-train BERT (masked LM + next sentence) on prepared shards"),
    "finetune": ("bertkit.cli.finetune", "fine-tune a pre-trained model on a task (classification, ner, qa, ...)"),
    "evaluate": ("bertkit.cli.finetune", "score a fine-tuned model on a labelled file"),
    "predict": ("bertkit.cli.finetune", "write a fine-tuned model's predictions for a file"),
    "distill": ("bertkit.cli.distill", "distil a teacher into a student with fewer of its layers (DistilBERT)"),
    "embed": ("bertkit.cli.inference",
              "embed one text per row into resumable shards (-o DIR) or a .npy matrix (-o OUT.npy)"),
    "index": ("bertkit.cli.search", "build a vector index (FAISS) over `bertkit embed -o DIR`'s folder"),
    "search": ("bertkit.cli.search", "the top-k rows of an index for text queries"),
    "fill-mask": ("bertkit.cli.explore", "top-k tokens for each mask token of a text"),
    "extract-features": ("bertkit.cli.explore", "per-token hidden states as google-research/bert JSONL"),
    "attention": ("bertkit.cli.explore", "PNG grid + HTML page of every layer's and head's attention"),
    "export-onnx": ("bertkit.cli.export", "export a model folder (any head) to ONNX"),
    "serve": ("bertkit.cli.serve", "serve a model folder over HTTP (/embed, /fill-mask, /classify, ...)"),
    "demo": ("bertkit.cli.demo", "walk through BERT end to end on the bundled data (offline, ~10 min on 2 cores)"),
}
VERB_MODULES = list(dict.fromkeys(module for module, _ in VERBS.values()))
HELP_WIDTH = 100  # the help's width when stdout is not a terminal (a pipe, a file, a test)


def first_sentence(text: str) -> str:
    """A docstring's first sentence ('e.g.' and '(...)' do not end it), for the compact help."""
    depth = 0
    for i, c in enumerate(text):
        depth += c in "([{"
        depth -= c in ")]}" and depth > 0
        if c in ".;" and depth == 0 and text[i + 1:i + 2] in ("", " ") and not text[:i + 1].endswith(
                ("e.g.", "i.e.", "etc.", "vs.", " al.")):
            return text[:i + 1] if c == "." else text[:i]
    return text


class HelpFormatter(argparse.HelpFormatter):
    """One spelling per option (its first) with its type, its default and the first sentence of its help cut to one
    line (`full`: the whole help, as `--help-all` shows it); a usage line of what is required and `[options]`."""

    full = False

    def __init__(self, prog: str) -> None:
        width = shutil.get_terminal_size((HELP_WIDTH, 24)).columns if sys.stdout.isatty() else HELP_WIDTH
        super().__init__(prog, max_help_position=34, width=min(width, 120))

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return super()._format_action_invocation(action)
        name = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            return "--[no-]" + name.removeprefix("--")
        if action.nargs == 0:
            return name
        return f"{name} {self._format_args(action, self._get_default_metavar_for_optional(action))}"

    def _get_help_string(self, action: argparse.Action) -> str:
        shown = getattr(action, "shown_default", None)
        default = f" (default {shown})" if shown is not None and "%(default)" not in (action.help or "") else ""
        text = (action.help or "") if self.full else first_sentence(action.help or "")
        room = self._width - min(self._action_max_length + 2, self._max_help_position) - len(default)
        if not self.full and len(text) > room and "%(" not in text:
            text = text[:max(room - 1, 0)].rstrip(" ,;:(") + "…"
        return text + default.replace("%", "%%")

    def _format_usage(self, usage: str | None, actions: Any, groups: Any, prefix: str | None) -> str:
        if usage is not None:
            return super()._format_usage(usage, actions, groups, prefix)
        parts = [self._prog]
        for action in actions:
            if action.help == argparse.SUPPRESS:
                continue
            if not action.option_strings:
                parts.append(self._format_args(action, action.dest.upper()))
            elif action.required:
                parts.append(self._format_action_invocation(action))
        if any(a.option_strings and not a.required and a.help != argparse.SUPPRESS for a in actions):
            parts.append("[options]")
        return f"{'usage: ' if prefix is None else prefix}{' '.join(parts)}\n\n"


class _HelpAll(argparse.Action):
    """`--help-all`: the help with every option's whole text."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show every option's whole help and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        HelpFormatter.full = True
        try:
            parser.print_help()
        finally:
            HelpFormatter.full = False
        parser.exit()


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose `error` names the nearest option or verb to a misspelt one."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        hint = self.suggestion(message)
        super().error(message + (f"; did you mean {hint}?" if hint else ""))

    def suggestion(self, message: str) -> str | None:
        """The nearest known name(s) to the unknown one a message reports (None when there is none close)."""
        found = re.search(r"unrecognized arguments: (\S+)|invalid choice: '([^']+)'", message)
        if not found:
            return None
        word = (found.group(1) or found.group(2)).split("=")[0]
        known = [s for a in self._actions for s in a.option_strings] if word.startswith("-") else [
            c for a in self._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices]
        near = difflib.get_close_matches(word, known, n=2, cutoff=0.6)
        return " or ".join(near) or None


class _Verbs:
    """The subparsers as a verb module sees them: `add_parser(name, ...)` builds that verb with its help from
    VERBS and the compact help, or, for a verb not being built, returns a throwaway parser (it is listed already)."""

    def __init__(self, sub: argparse._SubParsersAction, wanted: set[str]) -> None:
        self.sub, self.wanted = sub, wanted

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name not in self.wanted:
            return Parser(add_help=False)
        self.wanted.discard(name)
        parser = self.sub.add_parser(name, help=VERBS[name][1], formatter_class=HelpFormatter, **kwargs)
        parser.add_argument("--help-all", action=_HelpAll)
        return parser


def build_parser(verb: str | None = "*") -> argparse.ArgumentParser:
    """The argument parser with `verb` built ("*": every verb, as the reference pages need; None: none), the others
    listed by name and help."""
    from importlib.metadata import version

    parser = Parser(prog="bertkit", description="BERT end to end: tokenize, pre-train, fine-tune, evaluate and "
                    "serve. `bertkit VERB --help` shows a verb's options.", formatter_class=HelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"bertkit {version('bertkit')}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    wanted = set(VERBS) if verb == "*" else {verb} & set(VERBS)
    verbs = _Verbs(sub, set(wanted))
    for module in VERB_MODULES:
        if any(VERBS[name][0] == module for name in wanted):
            importlib.import_module(module).register(verbs)
    for name, (_, text) in VERBS.items():  # the verbs not built: listed, in VERBS' order
        if name not in sub.choices:
            sub.add_parser(name, help=text, add_help=False)
    sub._choices_actions.sort(key=lambda a: list(VERBS).index(a.dest))
    return parser


def chosen_verb(argv: list[str]) -> str | None:
    """The verb of a command line: its first word that is not an option (None when there is none)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bertkit` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(chosen_verb(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:  # answered by the verb's parser: its usage, and the option nearest to the misspelt one
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        verb_parser = sub.choices.get(getattr(args, "command", None) or "", parser)
        verb_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = args.func(args)
    except Interrupted as e:
        print(f"bertkit {args.command}: {e}", file=sys.stderr)
        return 128 + e.signal
    except BertkitError as e:
        if args.debug:
            traceback.print_exc()
        print(f"bertkit {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bertkit {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bertkit info DIR | head`: the reader left; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 141
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
