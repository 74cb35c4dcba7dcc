"""Attention pictures: every layer's and head's attention map as one PNG grid, plus a self-contained HTML page."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import torch

from bertkit.dataclass_io import check_value
from bertkit.inference.options import ATTENTION_TOKENS, AttentionOptions, check_window
from bertkit.io import atomic_open, atomic_write_text
from bertkit.model import BertPreTrainedModel
from bertkit.model.heads import base_model

DPI = 110  # the grid's resolution, lowered for grids that would exceed MAX_PICTURE_PIXELS
MAX_PICTURE_PIXELS = 2**26  # about 270 MB of canvas: a 12 x 12 grid of 64-token maps is drawn at 88 dpi


def attention_maps(model: BertPreTrainedModel, tokenizer: Any, text: str, pair: str | None = None,
                   max_length: int = ATTENTION_TOKENS) -> tuple[list[str], torch.Tensor]:
    """Tokens and attention probabilities, (layers, heads, seq, seq), of one text or pair."""
    max_length = check_value(AttentionOptions, "max_length", max_length, "max_length")
    bert = base_model(model)
    check_window(max_length, bert.config)
    enc = tokenizer.encode(text, pair=pair, max_length=max_length, truncation=True)
    ids = torch.tensor([list(enc.input_ids)])
    types = torch.tensor([list(enc.token_type_ids)])
    with torch.inference_mode():
        out = bert(ids, torch.ones_like(ids), types, output_attentions=True)
    maps = torch.stack([a[0] for a in out.attentions]).float()
    return tokenizer.convert_ids_to_tokens(list(enc.input_ids)), maps


def picture_size(layers: int, heads: int, tokens: int) -> tuple[float, float, float]:
    """The attention grid's (width, height) in inches and its resolution in dots per inch: DPI, lowered so that the
    picture holds at most MAX_PICTURE_PIXELS (a 12 x 12 grid of 250-token maps at 110 dpi is 37,000 pixels square:
    5 GB of canvas, drawn for minutes)."""
    cell = max(1.6, 0.11 * tokens + 0.6)
    width, height = cell * heads + 1, cell * layers + 1
    return width, height, min(DPI, (MAX_PICTURE_PIXELS / (width * height)) ** 0.5)


def render_png(tokens: list[str], maps: torch.Tensor, path: str | Path, title: str = "") -> None:
    """Draw a (layers x heads) grid of heat maps, query tokens down the rows and key tokens along the columns, at
    most MAX_PICTURE_PIXELS large (`picture_size`, worked out before anything is drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads, n, _ = maps.shape
    width, height, dpi = picture_size(layers, heads, n)
    fig, axes = plt.subplots(layers, heads, figsize=(width, height), dpi=dpi, squeeze=False)  # tight_layout draws too
    font = max(3.0, min(7.0, 160.0 / n))
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(maps[layer, head].numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="equal")
            # Ticks only where they are labelled (the bottom row, the left column): a tick per token on every map
            # costs as much as the drawing, and these ticks have no length.
            last_row, first_column = layer == layers - 1, head == 0
            ax.set_xticks(range(n) if last_row else [])
            ax.set_yticks(range(n) if first_column else [])
            if last_row:
                ax.set_xticklabels(tokens, rotation=90, fontsize=font)
            if first_column:
                ax.set_yticklabels(tokens, fontsize=font)
            ax.tick_params(length=0)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=9)
    fig.suptitle(title or "attention (rows: query token, columns: key token)", fontsize=11)
    fig.tight_layout()
    with atomic_open(path, "wb", encoding=None) as f:
        fig.savefig(f, format="png", dpi=dpi)
    plt.close(fig)


def write_html(png_path: str | Path, html_path: str | Path, tokens: list[str], title: str) -> None:
    """A self-contained page: the PNG inlined as base64 and the token list."""
    data = base64.b64encode(Path(png_path).read_bytes()).decode("ascii")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1em}} img{{max-width:100%}} code{{background:#eee;padding:0 3px}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>Each cell is one head of one layer; row = query token, column = key token, colour = attention probability.</p>
<p>Tokens: {' '.join(f'<code>{html.escape(t)}</code>' for t in tokens)}</p>
<img alt="attention maps" src="data:image/png;base64,{data}">
</body></html>
"""
    atomic_write_text(html_path, page)
