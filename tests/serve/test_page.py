"""The service's page in a real browser: headless Chromium (Debian's package) opens `bertkit serve`'s page for
each kind of model folder, runs every panel's example request, and the rendered answers are checked against the
endpoints' own JSON. Skipped, with the reason, where no Chromium is installed. Screenshots go to
$BERTKIT_SCREENSHOTS (a folder) when set."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inference"))
from test_serve import Server, httpx  # noqa: E402
from inference_helpers import tiny_folder  # noqa: E402

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium)")


def browse(url: str, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (and, given a path, a screenshot of it)."""
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--virtual-time-budget=20000", "--window-size=1280,1400"]
    if screenshot is not None:
        subprocess.run([*common, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
    done = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def panel_html(dom: str, endpoint: str) -> str:
    match = re.search(rf'<section id="panel-{re.escape(endpoint)}" data-state="(\w+)">(.*?)</section>', dom, re.S)
    assert match, f"no panel for /{endpoint}"
    assert match.group(1) == "done", match.group(2)[-500:]
    return match.group(2)


def entity_spans(tokens: list[dict]) -> list[tuple[int, int, str]]:
    """IOB2-tagged words of a /ner answer as entity spans (start, end, type) of the text: B-X starts one, an I-X
    right after a word of the same entity continues it, any other I-X starts one (the page's rule, written again
    here so that the test does not read it from the page)."""
    spans: list[list] = []
    for i, t in enumerate(tokens):
        if t["label"] == "O":
            continue
        kind = t["label"][2:]
        if t["label"].startswith("I-") and spans and spans[-1][2] == kind and spans[-1][3] == i - 1:
            spans[-1][1], spans[-1][3] = t["end"], i
        else:
            spans.append([t["start"], t["end"], kind, i])
    return [(a, b, kind) for a, b, kind, _ in spans]


def test_entity_spans_merge_an_entitys_words() -> None:
    tokens = [{"label": label, "start": a, "end": b} for label, (a, b) in zip(
        ["B-LOC", "I-LOC", "O", "I-PER", "I-PER", "B-PER", "I-ORG"], [(0, 3), (4, 8), (9, 11), (12, 15), (16, 19),
                                                                      (20, 23), (24, 27)])]
    assert entity_spans(tokens) == [(0, 8, "LOC"), (12, 19, "PER"), (20, 23, "PER"), (24, 27, "ORG")]


def shots(name: str) -> Path | None:
    folder = os.environ.get("BERTKIT_SCREENSHOTS")
    return Path(folder) / f"search-{name}.png" if folder else None


def test_page_is_bundled_and_fetches_nothing_from_elsewhere(tmp_path: Path) -> None:
    with Server(tiny_folder(tmp_path, "BertModel")) as server:
        page = httpx.get(f"{server.url}/").text
    assert "<script" in page and "__EXAMPLES__" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page) and "fetch(\"http" not in page


def test_masked_lm_page_with_search(tmp_path: Path) -> None:
    pytest.importorskip("faiss", reason="/search needs faiss-cpu")
    from bertkit.inference.index import IndexOptions, build_index
    from bertkit.jobs.embed import EmbedConfig
    from bertkit.jobs.embed import run as embed

    folder = tiny_folder(tmp_path, "BertForMaskedLM")
    (tmp_path / "corpus.txt").write_text("the river bank\na loan from the bank\nfish in the river\nmusic all night\n")
    embed(EmbedConfig(input=str(tmp_path / "corpus.txt"), output=str(tmp_path / "emb"), model=str(folder),
                      normalize=True, precision="fp32", progress=False))
    build_index(tmp_path / "emb", tmp_path / "idx", IndexOptions())
    with Server(folder, index=str(tmp_path / "idx")) as server:
        dom = browse(f"{server.url}/?run", shots("fill-mask-embed-search"))
        fill = httpx.post(f"{server.url}/fill-mask", json={"texts": ["Paris is the [MASK] of France."], "top_k": 5})
        found = httpx.post(f"{server.url}/search", json={"queries": ["a question about the corpus"], "top_k": 5})
    tokens = re.findall(r'<span class="name" title="([^"]*)">', panel_html(dom, "fill-mask"))
    assert tokens == [unescape(t["token"]) for t in fill.json()["results"][0][0]] and len(tokens) == 5
    hits = re.findall(r"<li>(.*?) <span", panel_html(dom, "search"))
    assert hits == [h["text"] for h in found.json()["results"][0]] and len(hits) == 4
    assert "32 dims" in panel_html(dom, "embed")


def test_task_pages_highlight_entities_answers_and_probabilities(tmp_path: Path) -> None:
    for head, endpoint in (("BertForTokenClassification", "ner"), ("BertForQuestionAnswering", "qa"),
                           ("BertForSequenceClassification", "classify")):
        with Server(tiny_folder(tmp_path, head)) as server:
            dom = browse(f"{server.url}/?run", shots(endpoint))
            html = panel_html(dom, endpoint)
            if endpoint == "ner":
                texts = ["John lives in Paris.", "The committee met in New York on a cold Tuesday."]
                answer = httpx.post(f"{server.url}/ner", json={"texts": texts}).json()["results"]
                entities = [text[a:b] for text, tokens in zip(texts, answer) for a, b, _ in entity_spans(tokens)]
                assert re.findall(r"<mark[^>]*>([^<]*)<small>", html) == entities
                shown = [unescape(re.sub(r"<[^>]+>", "", re.sub(r"<small>.*?</small>", "", para)))
                         for para in re.findall(r"<p>(.*?)</p>", html, re.S)]
                assert shown == texts  # the text as sent (case, spacing, punctuation), not the lower-cased words
            elif endpoint == "qa":
                body = {"question": "Where does John live?", "context": "John lives in Paris."}
                answer = httpx.post(f"{server.url}/qa", json=body).json()
                assert re.findall(r'<mark class="answer">([^<]*)</mark>', html) == [answer["answer"]]
            else:
                labels = re.findall(r'<span class="name" title="([^"]*)">', html)
                assert sorted(labels) == ["neg", "neg", "pos", "pos"]  # two texts, two labels each


def test_swagger_ui_renders_offline_from_the_package(tmp_path: Path) -> None:
    """/docs in a browser with no network: Swagger UI (its files from the service) draws an operation for each route
    of /openapi.json, the protocols' among them, and none of another head's."""
    with Server(tiny_folder(tmp_path, "BertForSequenceClassification")) as server:
        dom = browse(f"{server.url}/docs")
        paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    drawn = set(re.findall(r'data-path="([^"]+)"', dom))
    assert drawn == set(paths) and {"/v1/embeddings", "/rerank", "/classify"} <= drawn, drawn
    assert "/ner" not in drawn


def test_page_sends_the_api_key_it_is_given_and_shows_the_refusal_without_it(tmp_path: Path) -> None:
    """With --api-key, the page itself is open (code and examples only) and each panel's request carries the key
    given as the page's fragment; opened without it, each panel shows the service's 401 instead of an answer."""
    key = "k" * 16 + "-page-test"
    with Server(tiny_folder(tmp_path, "BertForSequenceClassification"), api_key=key) as server:
        assert httpx.get(f"{server.url}/").status_code == 200
        assert httpx.post(f"{server.url}/classify", json={"texts": ["a"]}).status_code == 401
        with_key = browse(f"{server.url}/?run#key={key}")
        without = browse(f"{server.url}/?run")
    labels = re.findall(r'<span class="name" title="([^"]*)">', panel_html(with_key, "classify"))
    assert sorted(labels) == ["neg", "neg", "pos", "pos"]
    refused = re.search(r'<section id="panel-classify" data-state="(\w+)">(.*?)</section>', without, re.S)
    assert refused and refused.group(1) == "error" and "401: this service needs an API key" in refused.group(2)
    assert 'id="key-row"' in with_key and 'id="key-row" hidden' not in with_key  # the field is shown
