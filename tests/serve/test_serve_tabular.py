"""/classify for a classifier fine-tuned with a template and numeric/categorical columns: the request's columns
are read as the training file's rows were, with the statistics saved in the folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tasks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from inference_helpers import tiny_folder
from test_tabular import OPTIONS, ROWS, write_csv

from bertkit.cli import main

pytest.importorskip("fastapi", reason="the server tests need fastapi (pip install 'bertkit[serve]')")
try:
    from fastapi.testclient import TestClient
except RuntimeError as e:  # starlette's TestClient says so when its HTTP client (httpx2, or httpx) is missing
    pytest.skip(f"fastapi's TestClient cannot run here: {e}", allow_module_level=True)

from bertkit.serve import ServeSettings, create_app

COLUMNS = {"Age": 41, "Department Name": "Tops", "Title": "Nice", "Review Text": "Soft and warm", "Rating": "4"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("serve_tabular")
    tiny_dir = tiny_folder(tmp, "BertModel")
    train = write_csv(tmp / "train.csv", ROWS * 2)
    assert main(["finetune", "--model", str(tiny_dir), "--output", str(tmp / "run"), "--no-progress", "--epochs", "1",
                 "--task", "classification", "--train", str(train), "--dev", str(train), "--max-length", "32",
                 "--template", "{Title}. {Review Text}", "--label-column", "Recommended IND", *OPTIONS]) == 0
    return tmp / "run" / "best"


def test_classify_reads_the_columns_as_predict_does(folder: Path) -> None:
    from bertkit.jobs.finetune import _load_finetuned

    task, settings, model, tokenizer = _load_finetuned(str(folder))
    rows = [COLUMNS, {**COLUMNS, "Age": "", "Department Name": "Swim", "Rating": 1}]  # empty age, unseen category
    with TestClient(create_app(folder, ServeSettings(precision="fp32"))) as client:
        r = client.post("/classify", json={"columns": rows})
        assert r.status_code == 200, r.text
        served = r.json()["results"]
        # The same rows through the task's own reading of a file, with the folder's saved statistics.
        path = write_csv(folder.parent / "rows.csv", [[str(row[k]) for k in COLUMNS] for row in rows],
                         list(COLUMNS))
        examples = task.read(path, settings, labelled=False)
        features = task.features(examples, tokenizer, settings, training=False)
        assert features[1]["numeric_features"][2] == 1.0 and features[1]["categorical_ids"] == [0]
        for got, feature in zip(served, features):
            with torch.no_grad():
                logits = model(torch.tensor([feature["input_ids"]]),
                               numeric_features=torch.tensor([feature["numeric_features"]]),
                               categorical_ids=torch.tensor([feature["categorical_ids"]])).logits[0]
            probs = logits.softmax(-1).tolist()
            assert [got["probabilities"][n] for n in settings["label_names"]] == pytest.approx(probs, abs=1e-5)

        bad = client.post("/classify", json={"columns": [{**COLUMNS, "Age": "old"}]})
        assert bad.status_code == 400 and "columns[0]" in bad.text and "'Age'" in bad.text
        missing = client.post("/classify", json={"columns": [{k: v for k, v in COLUMNS.items() if k != "Rating"}]})
        assert missing.status_code == 400 and "Rating" in missing.text
        assert client.post("/classify", json={"texts": ["Soft and warm"]}).status_code == 400  # columns needed
        both = client.post("/classify", json={"texts": ["x"], "columns": [COLUMNS]})
        assert both.status_code == 400 and "template" in both.text
