"""One inference front (issue 26, item 4): the pooling modes and the precisions are declared once and every door reads
them there (the Encoder, `bertkit.load(...).encode`, `bertkit embed`, the server's /embed schema, a folder's
sentence-transformers settings), and a loaded model keeps its Encoders, so int8 calibrates once per model."""

from __future__ import annotations

import argparse
import inspect
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from inference_helpers import minilm_folder, reference_embed_texts, tiny_folder, tokenizer_for

import bertkit
from bertkit.cli import build_parser, main
from bertkit.errors import ConfigError
from bertkit.inference import pooling
from bertkit.inference.encoder import Encoder, Encoders
from bertkit.inference.precision import DEFAULT_PRECISION, PRECISIONS
from bertkit.model import BertModel
from bertkit.serve.settings import ServeSettings

TEXTS = ["The committee met on a cold morning in March to talk about the old bridge over the river.",
         "She walked along the quiet river with her brother, talking of the harvest and the weather.",
         "A short one."]


def max_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The largest value of each feature over the real tokens (sentence-transformers' max pooling)."""
    return hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, float("-inf")).amax(1)


MAX = pooling.Pooling(max_pool, "the largest value of each feature over the real tokens", "pooling_mode_max_tokens")


def max_over_tokens(folder: Path, texts: list[str]) -> np.ndarray:
    """Each text run alone (no padding, no mask) through the folder's BertModel, max over its tokens: the answer
    a max pooling must give, computed without bertkit's batching or pooling code."""
    model, tok = BertModel.from_pretrained(str(folder)).eval(), tokenizer_for(folder)
    with torch.inference_mode():
        return np.stack([model(torch.tensor([tok.encode(t).input_ids])).last_hidden_state[0].amax(0).numpy()
                         for t in texts])


def subcommand_option(verb: str, dest: str) -> argparse.Action:
    """The `bertkit VERB` option stored in `dest`, as the real parser builds it."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return next(a for a in subparsers.choices[verb]._actions if a.dest == dest)


def test_a_new_pooling_mode_is_one_entry_in_the_registry(tmp_path: Path, monkeypatch, capsys) -> None:
    """A toy "max" pooling, registered in bertkit.inference.pooling.POOLINGS alone, reaches the Encoder,
    `bertkit.load(...).encode`, `bertkit embed --pooling`, the server's /embed (schema and answer) and a folder's
    1_Pooling/config.json; before it is registered, each of them refuses it (or, for the folder, says so)."""
    fastapi_testclient = pytest.importorskip("fastapi.testclient", reason="the server part needs fastapi and httpx")
    from bertkit.serve import create_app

    folder = tiny_folder(tmp_path, "BertModel")
    expected = max_over_tokens(folder, TEXTS)
    model, tok = BertModel.from_pretrained(str(folder)), tokenizer_for(folder)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    st_folder = tmp_path / "st"
    st_folder.mkdir()
    for f in folder.iterdir():
        (st_folder / f.name).write_bytes(f.read_bytes())
    (st_folder / "1_Pooling").mkdir()
    (st_folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                     "pooling_mode_max_tokens": True}))

    # Not registered: every door refuses "max".
    with pytest.raises(ConfigError, match="pooling must be one of mean, cls, got 'max'"):
        Encoder(model, tok, precision="fp32").encode(TEXTS, pooling="max")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["embed", "--model", str(folder), "in.txt", "-o", "o.npy", "--pooling", "max"])
    assert "invalid choice: 'max'" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="pooling_mode_max_tokens, which bertkit has no pooling for"):
        unknown = bertkit.load(st_folder)
    assert "pooling" not in unknown.defaults
    with fastapi_testclient.TestClient(create_app(folder, ServeSettings(precision="fp32"))) as client:
        assert client.post("/embed", json={"texts": TEXTS, "pooling": "max"}).status_code == 422

    # Registered in the one place: every door takes it, and it computes the max over the real tokens.
    monkeypatch.setitem(pooling.POOLINGS, "max", MAX)
    encoded = Encoder(model, tok, precision="fp32").encode(TEXTS, pooling="max", batch_size=2).numpy()
    np.testing.assert_allclose(encoded, expected, atol=1e-5)
    assert np.abs(encoded - Encoder(model, tok, precision="fp32").encode(TEXTS).numpy()).max() > 0.1  # not mean
    np.testing.assert_allclose(reference_embed_texts(model, tok, TEXTS, pooling="max"), expected, atol=1e-5)
    np.testing.assert_allclose(bertkit.load(folder).encode(TEXTS, pooling="max", precision="fp32"), expected,
                               atol=1e-5)
    loaded = bertkit.load(st_folder)  # the folder's switch now names a known mode: its default
    assert loaded.defaults["pooling"] == "max"
    np.testing.assert_allclose(loaded.encode(TEXTS, precision="fp32"), expected, atol=1e-5)
    option = subcommand_option("embed", "pooling")
    assert option.choices == ("mean", "cls", "max") and "max: the largest value" in option.help
    assert main(["embed", "--model", str(folder), str(tmp_path / "in.txt"), "-o", str(tmp_path / "o.npy"),
                 "--pooling", "max", "--precision", "fp32"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), expected, atol=1e-5)
    with fastapi_testclient.TestClient(create_app(folder, ServeSettings(precision="fp32"))) as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]["EmbedRequest"]
        assert schema["properties"]["pooling"]["anyOf"][0]["enum"] == ["mean", "cls", "max"]
        answer = client.post("/embed", json={"texts": TEXTS, "pooling": "max"})
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(np.array(answer.json()["embeddings"]), expected, atol=1e-5)
        assert client.post("/embed", json={"texts": TEXTS, "pooling": "min"}).status_code == 422


def test_precision_choices_and_default_are_declared_once() -> None:
    """bertkit.inference.precision holds the choices and the one default ("auto"; the Encoder's was "fp32" while
    `encode`, the CLI and the server said "auto"); every door takes both from there."""
    assert DEFAULT_PRECISION == "auto" and PRECISIONS == ("auto", "fp32", "bf16", "int8")
    option = subcommand_option("embed", "precision")
    assert (tuple(option.choices), option.default) == (PRECISIONS, DEFAULT_PRECISION)
    for door in (Encoder, bertkit.Bert.encode, bertkit.Bert.encoder, Encoders.get):
        assert inspect.signature(door).parameters["precision"].default == DEFAULT_PRECISION, door
    assert ServeSettings().precision == DEFAULT_PRECISION
    for precision in PRECISIONS:
        ServeSettings(precision=precision).validate()
    with pytest.raises(ConfigError, match="expected one of auto, fp32, bf16, int8"):
        ServeSettings(precision="fp16").validate()


def spy_on_calibration(monkeypatch) -> list[int]:
    """A list that grows by one each time an Encoder calibrates int8."""
    calls: list[int] = []
    calibrate = Encoder.calibrate

    def counted(self, *args, **kwargs):
        calls.append(1)
        return calibrate(self, *args, **kwargs)

    monkeypatch.setattr(Encoder, "calibrate", counted)
    return calls


def test_a_loaded_model_calibrates_int8_once(tmp_path: Path, monkeypatch) -> None:
    """`bertkit.load(...).encode(..., precision="int8")` built a new Encoder on every call, so it calibrated (seconds)
    on every call; now the loaded model keeps one Encoder per (precision, max_length), and other precisions do not
    calibrate."""
    calls = spy_on_calibration(monkeypatch)
    bert = bertkit.load(tiny_folder(tmp_path, "BertModel"))
    first = bert.encode(TEXTS, precision="int8", max_length=64)
    second = bert.encode(TEXTS, precision="int8", max_length=64)
    assert len(calls) == 1 and np.array_equal(first, second)
    assert bert.encoder("int8", 64) is bert.encoder("int8", 64) and bert.encoder("int8", 64).int8_plan is not None
    bert.encode(TEXTS, precision="fp32", max_length=64)
    assert len(calls) == 1 and bert.encoder("fp32", 64).bert is bert.model  # fp32 runs the model's own weights


@pytest.mark.slow
def test_second_int8_encode_on_minilm_is_at_least_3x_faster(monkeypatch) -> None:
    """On MiniLM, the second int8 `encode` of the same texts reuses the calibrated Encoder: one calibration, the same
    vectors bit for bit, and at least 3x faster than the first (measured 30x; it was about 1x, calibrating again).
    Slow: the one calibration takes 15-70 s on 2 shared cores."""
    calls = spy_on_calibration(monkeypatch)
    bert = bertkit.load(minilm_folder())
    start = time.perf_counter()
    first = bert.encode(TEXTS, precision="int8", max_length=64)
    middle = time.perf_counter()
    second = bert.encode(TEXTS, precision="int8", max_length=64)
    ratio = (middle - start) / (time.perf_counter() - middle)
    print(f"\n  int8 first / second encode: {ratio:.1f}x")
    assert len(calls) == 1 and np.array_equal(first, second)
    assert ratio >= 3
