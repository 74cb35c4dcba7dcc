"""The real server on a loopback port with folders of BERT's family (tests/family_models.py: tiny random models with
the family's own tokenizer): a fine-tuned pair classifier's /classify and /rerank, a masked LM's /fill-mask (the
family's mask token) and a sentence-embedding folder's /embed answer what `bertkit.load(folder)` answers in Python.
Unmarked: one family; `-m slow` runs every family."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_serve import Server, httpx  # noqa: E402

import bertkit  # noqa: E402
from family_models import FAMILIES, fine_tuned, model_folder, task_files  # noqa: E402

TEXTS = ["The river floods the valley every spring.", "Banks lend money to families who buy houses."]
PAIRS = ["Water covers the fields.", "Loans are given to buyers."]


@pytest.mark.parametrize("family", [f if f == "distilbert" else pytest.param(f, marks=pytest.mark.slow)
                                    for f in FAMILIES])
def test_family_folders_serve_what_python_answers(family: str, tmp_path: Path, data_dir: Path,
                                                  tmp_path_factory: pytest.TempPathFactory,
                                                  choice_questions: list[dict]) -> None:
    data = task_files(tmp_path_factory, data_dir, choice_questions)
    classifier = fine_tuned(family, "pairs", tmp_path_factory, data_dir, data)
    with Server(classifier) as server:
        c = httpx.Client(base_url=server.url)
        answer = c.post("/classify", json={"texts": TEXTS, "pairs": PAIRS})
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"] == bertkit.load(classifier).classify(list(zip(TEXTS, PAIRS)))
        ranked = c.post("/rerank", json={"query": TEXTS[0], "texts": PAIRS, "truncate": True})
        assert ranked.status_code == 200, ranked.text
        assert len(ranked.json()) == 2
    masked = model_folder(family, tmp_path / "mlm", data_dir, head="BertForMaskedLM")
    mask = bertkit.load(masked).tokenizer.mask_token
    with Server(masked) as server:
        answer = httpx.post(f"{server.url}/fill-mask", json={"texts": [f"Banks {mask} money."], "top_k": 3})
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"] == [bertkit.load(masked).fill_mask(f"Banks {mask} money.", top_k=3)]
    embedder = model_folder(family, tmp_path / "st", data_dir, pooling="mean")
    with Server(embedder) as server:
        answer = httpx.post(f"{server.url}/embed", json={"texts": TEXTS})
        assert answer.status_code == 200, answer.text
        vectors = np.array(answer.json()["embeddings"], dtype=np.float32)
        assert np.array_equal(vectors, bertkit.load(embedder).encode(TEXTS, precision="fp32"))
