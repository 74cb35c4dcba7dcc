"""In-process A/B of the sparse MLM head: HEAD's boolean-mask selection against the plan's nonzero positions."""
import statistics, time, torch, torch.nn.functional as F
from bertkit.model import BertConfig
from bertkit.model.heads import BertLMPredictionHead, masked_lm_logits
torch.set_num_threads(1)
torch.manual_seed(0)
IGNORE = -100
def old(head, sequence, labels):
    selected = labels.reshape(-1) != IGNORE
    logits = head(sequence.reshape(-1, sequence.shape[-1])[selected])
    return logits, F.cross_entropy(logits.float(), labels.reshape(-1)[selected])
def new(head, sequence, labels):
    logits, loss, _ = masked_lm_logits(head, sequence, labels)
    return logits, loss
head = BertLMPredictionHead(BertConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024))
seq = torch.randn(16, 128, 256, requires_grad=True)
labels = torch.full((16, 128), IGNORE)
for r in range(16):
    idx = torch.randperm(128)[:19]; labels[r, idx] = torch.randint(0, 8192, (19,))
la, lb = old(head, seq, labels)[1], new(head, seq, labels)[1]
assert torch.equal(la, lb), (la, lb)
times = {"old": [], "new": []}
for i in range(60):
    for name, f in (("old", old), ("new", new)) if i % 2 == 0 else (("new", new), ("old", old)):
        t = time.perf_counter()
        for _ in range(5):
            _, loss = f(head, seq, labels); loss.backward()
        times[name].append((time.perf_counter() - t) / 5 * 1e3)
for k, v in times.items():
    print(k, f"median {statistics.median(v):.2f} ms, min {min(v):.2f}, max {max(v):.2f}")
print("new/old median", statistics.median(times["new"]) / statistics.median(times["old"]))
