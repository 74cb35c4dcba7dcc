"""QA windows, labels and n-best decoding on crafted windows, then on the real tokenizer and real SQuAD."""

from __future__ import annotations

import numpy as np
import pytest

from bertkit.tasks import qa

# Context of nine one-character-wide "tokens": token k covers characters [2k, 2k + 1).
CONTEXT = "a b c d e f g h i"
TOKENS = [(2 * k, 2 * k + 1) for k in range(9)]


def window(tokens: range, q_len: int = 2) -> list:
    """Offsets of `[CLS] q... [SEP] context[tokens] [SEP]`: None outside the context."""
    return [None] * (q_len + 2) + [TOKENS[k] for k in tokens] + [None]


def logits(offsets: list, start_at: dict[int, float], end_at: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """Start/end logits that are -50 everywhere but at the given context tokens (by index in CONTEXT)."""
    s, e = np.full(len(offsets), -50.0), np.full(len(offsets), -50.0)
    for i, off in enumerate(offsets):
        if off is not None:
            k = off[0] // 2
            s[i] = start_at.get(k, -50.0)
            e[i] = end_at.get(k, -50.0)
    return s, e


def test_labels_of_an_answer_across_a_window_boundary() -> None:
    w1, w2 = window(range(0, 6)), window(range(3, 9))  # overlap of 3 tokens (3, 4, 5)
    char_start, char_end = TOKENS[5][0], TOKENS[6][1]  # "f g": token 5 in both windows, token 6 only in w2
    assert qa.answer_tokens(w1, char_start, char_end) == (0, 0)  # not whole in w1 -> [CLS]
    s, e = qa.answer_tokens(w2, char_start, char_end)
    assert (w2[s][0], w2[e][1]) == (char_start, char_end)


def test_decoding_an_answer_across_a_window_boundary() -> None:
    w1, w2 = window(range(0, 6)), window(range(3, 9))
    flags = qa.max_context_flags([w1, w2])
    s1, e1 = logits(w1, {5: 4.0}, {5: 1.0})  # w1 cannot see the end of the answer
    s2, e2 = logits(w2, {5: 4.0}, {6: 4.0})
    answer, nbest = qa.decode_answer(CONTEXT, [
        {"start_logits": s1, "end_logits": e1, "offsets": w1, "max_context": flags[0]},
        {"start_logits": s2, "end_logits": e2, "offsets": w2, "max_context": flags[1]},
    ])
    assert answer == "f g"
    assert nbest[0] == (8.0, "f g")


def test_max_context_picks_the_window_with_most_context() -> None:
    w1, w2 = window(range(0, 6)), window(range(3, 9))
    flags = qa.max_context_flags([w1, w2])
    by_token = lambda w, f: {off[0] // 2 for off, ok in zip(w, f) if ok}  # noqa: E731
    # Token 3: w1 min(3, 2) = 2 vs w2 min(0, 5) = 0 -> w1. Token 5: w1 min(5, 0) = 0 vs w2 min(2, 3) = 2 -> w2.
    # Token 4: w1 min(4, 1) = 1, w2 min(1, 4) = 1, equal lengths -> a tie, and the first window wins.
    assert by_token(w1, flags[0]) == {0, 1, 2, 3, 4}
    assert by_token(w2, flags[1]) == {5, 6, 7, 8}


def test_start_outside_its_max_context_window_is_ignored() -> None:
    w1, w2 = window(range(0, 6)), window(range(3, 9))
    flags = qa.max_context_flags([w1, w2])
    s1, e1 = logits(w1, {5: 9.0}, {5: 9.0})  # token 5 has its max context in w2, so w1 may not start there
    s2, e2 = logits(w2, {7: 1.0}, {7: 1.0})
    answer, _ = qa.decode_answer(CONTEXT, [
        {"start_logits": s1, "end_logits": e1, "offsets": w1, "max_context": flags[0]},
        {"start_logits": s2, "end_logits": e2, "offsets": w2, "max_context": flags[1]},
    ])
    assert answer == "h"


def test_answer_at_the_very_end_of_the_context() -> None:
    w = window(range(0, 9))
    flags = qa.max_context_flags([w])
    char_start, char_end = TOKENS[7][0], len(CONTEXT)
    s, e = qa.answer_tokens(w, char_start, char_end)
    assert (s, e) == (len(w) - 3, len(w) - 2)  # the last two context tokens, before the final [SEP]
    sl, el = logits(w, {7: 3.0}, {8: 3.0})
    assert qa.decode_answer(CONTEXT, [{"start_logits": sl, "end_logits": el, "offsets": w,
                                       "max_context": flags[0]}])[0] == "h i"


def test_spans_respect_order_length_and_context() -> None:
    w = window(range(0, 9))
    flags = qa.max_context_flags([w])
    sl, el = logits(w, {6: 5.0, 1: 1.0}, {2: 5.0, 4: 0.5})  # best end comes before the best start
    sl[0] = el[0] = 20.0  # [CLS] is never a span in v1.1
    answer, nbest = qa.decode_answer(CONTEXT, [{"start_logits": sl, "end_logits": el, "offsets": w,
                                                "max_context": flags[0]}], max_answer_length=30)
    assert answer == "b c" and all(text for _, text in nbest)
    spans = qa.window_spans(sl, el, w, flags[0], max_answer_length=2)
    assert all((b - a + 1) // 2 <= 2 for _, a, b in spans)


def test_v2_unanswerable_and_threshold() -> None:
    w = window(range(0, 9))
    flags = qa.max_context_flags([w])
    sl, el = logits(w, {2: 2.0}, {2: 2.0})
    sl[0], el[0] = 3.0, 3.0  # null 6 > best span 4
    win = [{"start_logits": sl, "end_logits": el, "offsets": w, "max_context": flags[0]}]
    assert qa.decode_answer(CONTEXT, win, version_2=True)[0] == ""
    assert qa.decode_answer(CONTEXT, win, version_2=True, null_threshold=2.5)[0] == "c"
    assert qa.decode_answer(CONTEXT, win, version_2=False)[0] == "c"


def test_real_windows_overlap_by_doc_stride_and_labels_point_at_the_answer(tokenizer) -> None:
    context = " ".join(f"word{k} is here." for k in range(120))
    target = "word97 is here"
    start = context.index(target)
    ex = qa.QAExample("x", "Where is word97?", context, [(target, start)])
    task = qa.QATask()
    settings = task.settings({"max_length": 64, "doc_stride": 16})
    feats = task.features([ex], tokenizer, settings, training=True)
    # 649 context pieces; a window holds 64 - 8 ([CLS], 6 question pieces, [SEP]) - 1 ([SEP]) = 55 of them and
    # moves on by 55 - 16 = 39: 1 + ceil((649 - 55) / 39) = 17 windows, two of which hold the whole answer
    assert len(feats) == 17
    labelled = [f for f in feats if f["start_positions"] != 0]
    assert len(labelled) == 2
    for f in labelled:
        a, b = f["offsets"][f["start_positions"]][0], f["offsets"][f["end_positions"]][1]
        assert context[a:b] == target
    # consecutive windows share doc_stride context tokens (HF `stride` = overlap)
    ctx = [[o for o in f["offsets"] if o is not None] for f in feats]
    for left, right in zip(ctx, ctx[1:]):
        assert len(set(left) & set(right)) == 16
    # every context token is the max-context token of exactly one window
    owners = {}
    for f in feats:
        for o, ok in zip(f["offsets"], f["max_context"]):
            if ok:
                assert o not in owners
                owners[o] = True
    assert len(owners) == len({o for c in ctx for o in c})
    # Decoding logits that point at the labels gives back the answer.
    outputs = []
    for f in feats:
        s, e = np.zeros(len(f["input_ids"])), np.zeros(len(f["input_ids"]))
        s[f["start_positions"]] += 5
        e[f["end_positions"]] += 5
        outputs.append({"start_logits": s, "end_logits": e})
    assert task.decode([ex], feats, outputs, settings) == [target]


def test_read_squad_selection_and_counts(data_dir) -> None:
    path = data_dir / "squad_v1.1" / "dev-v1.1.json"
    assert len(qa.read_squad(path)) == 10570
    train, dev = qa.read_squad(f"{path}#:38"), qa.read_squad(f"{path}#38:")
    assert len(train) + len(dev) == 10570
    assert len(train) == 8582 and len(dev) == 1988
    assert {e.id for e in train}.isdisjoint({e.id for e in dev})


def test_bad_answer_start_names_the_question(tmp_path) -> None:
    import json

    from bertkit.errors import DataError

    doc = {"data": [{"paragraphs": [{"context": "Paris is in France.",
                                      "qas": [{"id": "q1", "question": "Where?",
                                               "answers": [{"text": "France", "answer_start": 3}]}]}]}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"bad\.json.*data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\].*q1.*3"):
        qa.read_squad(path)


def test_negative_answer_start_is_an_error(tmp_path) -> None:
    """context[-7:-1] == "France": Python's negative slicing must not make it look valid."""
    import json

    from bertkit.errors import DataError

    doc = {"data": [{"paragraphs": [{"context": "Paris is in France.",
                                      "qas": [{"id": "q1", "question": "Where?",
                                               "answers": [{"text": "France", "answer_start": -7}]}]}]}]}
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"answer_start -7 is outside the context"):
        qa.read_squad(path)
