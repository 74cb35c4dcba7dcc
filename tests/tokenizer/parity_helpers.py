"""What the tokenizer parity tests share: the shared data sets read as texts and pairs, the Unicode stress set, and
the field-by-field comparison with a transformers tokenizer (importable: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bertkit.errors import TokenizerError

HERE = Path(__file__).parent


# --- reading the data sets ------------------------------------------------------------------------------------------


def tsv_rows(path: Path, skip_header: bool) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8-sig").split("\n")
    rows = [line.rstrip("\r").split("\t") for line in lines if line.strip()]
    return rows[1:] if skip_header else rows


def single_texts(data: Path, name: str) -> list[str]:
    if name == "wikitext2":
        return [line for split in ("valid", "test")
                for line in (data / "wikitext2" / f"{split}.txt").read_text(encoding="utf-8").split("\n")]
    if name == "sst2":
        out = []
        for split in ("train", "dev", "test"):
            rows = tsv_rows(data / "sst2" / f"{split}.tsv", True)
            out += [r[1] if split == "test" else r[0] for r in rows]
        return out
    if name == "cola":
        out = [r[3] for split in ("train", "dev") for r in tsv_rows(data / "cola" / f"{split}.tsv", False)]
        return out + [r[1] for r in tsv_rows(data / "cola" / "test.tsv", True)]
    if name == "conll2003":
        out, cur = [], []
        for split in ("train", "valid"):
            for line in (data / "conll2003" / f"{split}.txt").read_text(encoding="utf-8").split("\n"):
                if not line.strip() or line.startswith("-DOCSTART-"):
                    if cur:
                        out.append(" ".join(cur))
                        cur = []
                else:
                    cur.append(line.split(" ")[0])
        return out + ([" ".join(cur)] if cur else [])
    raise KeyError(name)


def text_pairs(data: Path, name: str) -> tuple[list[str], list[str]]:
    rows: list[list[str]] = []
    if name == "mrpc":
        for split in ("train", "dev", "test"):
            rows += [[r[3], r[4]] for r in tsv_rows(data / "mrpc" / f"{split}.tsv", True)]
    elif name == "rte":
        for split in ("train", "dev", "test"):
            rows += [[r[1], r[2]] for r in tsv_rows(data / "rte" / f"{split}.tsv", True)]
    elif name == "qnli":
        for split in ("dev", "test"):
            rows += [[r[1], r[2]] for r in tsv_rows(data / "qnli" / f"{split}.tsv", True)]
    elif name == "squad":
        d = json.loads((data / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
        rows = [[qa["question"], p["context"]] for art in d["data"] for p in art["paragraphs"] for qa in p["qas"]]
    else:
        raise KeyError(name)
    return [r[0] for r in rows], [r[1] for r in rows]


def stress_texts() -> list[str]:
    return json.loads((HERE / "data" / "unicode_stress.json").read_text(encoding="utf-8"))



def first_difference(ours: Any, ref: Any, texts: list[str], pairs: list[str] | None) -> str:
    mapping = ref.get("overflow_to_sample_mapping", list(range(len(ref["input_ids"]))))
    for i in range(len(ref["input_ids"])):
        for ours_key, ref_key in (("input_ids", "input_ids"), ("token_type_ids", "token_type_ids"),
                                  ("offsets", "offset_mapping"), ("attention_mask", "attention_mask"),
                                  ("special_tokens_mask", "special_tokens_mask")):
            if ours[i].__getattribute__(ours_key) != ref[ref_key][i]:
                j = mapping[i]
                return (f"encoding {i} (text {j}: {texts[j]!r}" + (f", pair {pairs[j]!r}" if pairs else "")
                        + f"): {ours_key} differ\nours: {getattr(ours[i], ours_key)}\nref:  {ref[ref_key][i]}")
    return "lengths differ"


def assert_parity(tok: Any, ref: Any, texts: list[str], pairs: list[str] | None = None,
                  word_ids_every: int = 1, token_types: bool = True, **kwargs: Any) -> int:
    """Encode with both (batch calls) and compare every field; returns the number of encodings compared.

    `token_types=False` (a model without token types, such as DistilBERT): ours must all be 0, whatever the
    reference's post-processor gives a pair's second text."""
    ours = tok(texts, pairs, return_overflowing=kwargs.get("return_overflowing_tokens", False),
               truncation=kwargs.get("truncation", False), max_length=kwargs.get("max_length"),
               stride=kwargs.get("stride", 0), padding=kwargs.get("padding", False),
               pad_to_multiple_of=kwargs.get("pad_to_multiple_of"))
    ref_out = ref(texts, pairs, return_offsets_mapping=True, return_special_tokens_mask=True,
                  return_token_type_ids=True, **kwargs)
    if not token_types:
        assert all(t == 0 for row in ours["token_type_ids"] for t in row), "token type ids of a model without any"
        ref_out["token_type_ids"] = [[0] * len(row) for row in ref_out["token_type_ids"]]
    same = (ours["input_ids"] == ref_out["input_ids"] and ours["token_type_ids"] == ref_out["token_type_ids"]
            and ours["attention_mask"] == ref_out["attention_mask"]
            and ours["offsets"] == ref_out["offset_mapping"]
            and ours["special_tokens_mask"] == ref_out["special_tokens_mask"])
    assert same, first_difference(ours, ref_out, texts, pairs)
    if "overflow_to_sample_mapping" in ref_out:
        assert ours.overflow_to_sample_mapping == ref_out["overflow_to_sample_mapping"]
    if word_ids_every:
        for i in range(0, len(ours), word_ids_every):
            assert ours[i].word_ids == ref_out.word_ids(i), f"word ids differ for encoding {i}"
            assert ours[i].sequence_ids == ref_out.sequence_ids(i), f"sequence ids differ for encoding {i}"
    return len(ours)


def assert_parity_or_same_refusal(tok: Any, ref: Any, texts: list[str], pairs: list[str], token_types: bool = True,
                                  **kwargs: Any) -> None:
    """Pair by pair: the same encodings, or both refuse (a sequence too short to truncate, a stride too large)."""
    for a, b in zip(texts, pairs):
        try:
            ref([a], [b], **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # tokenizers raises Exception, or panics (stride >= window), on truncation errors
            with pytest.raises(TokenizerError):
                tok([a], [b], truncation=kwargs["truncation"], max_length=kwargs["max_length"],
                    stride=kwargs.get("stride", 0), return_overflowing=True)
            continue
        assert_parity(tok, ref, [a], [b], token_types=token_types, **kwargs)




# Snippets that test a tokenizer's normaliser and offsets: accents (composed and combining), CJK, emoji with
# joiners and modifiers, zero-width and direction marks, control characters, full-width forms, ligatures.
ODD_SNIPPETS = ["café", "e\u0301\u0302", "naïve", "中文", "日本語", "한국어", "😀", "👨\u200d👩\u200d👧", "👍🏽", "🇫🇷",
                "\u200b", "\u200c\u200d", "\ufeff", "\u200f", "\x00", "\x07", "\x1b", "\x85", "\t", "\u3000", "\xa0",
                "Ｆｕｌｌ", "ﬁ", "İı", "ß", "Ω", "\u0308", "Z\u0359\u035a", "\ufffd", "  ", "\r\n"]


def odd_unicode(texts: list[str]) -> list[str]:
    """Each text with two snippets of ODD_SNIPPETS put in (at a word boundary and inside a word), the i-th text
    getting the snippets i and 7i + 3, so every snippet lands beside letters, spaces and punctuation."""
    out = []
    for i, text in enumerate(texts):
        a, b = ODD_SNIPPETS[i % len(ODD_SNIPPETS)], ODD_SNIPPETS[(7 * i + 3) % len(ODD_SNIPPETS)]
        space = text.find(" ", len(text) // 3)
        cut = space if space >= 0 else len(text)
        middle = min(len(text), cut + 3)
        out.append(text[:cut] + a + text[cut:middle] + b + text[middle:])
    return out
