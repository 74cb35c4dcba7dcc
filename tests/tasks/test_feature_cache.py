"""The frozen-NER feature cache (bertkit.tasks.feature_cache): its key covers the encoder's config, a damaged file is
computed again with a warning, a dead writer's temporary file is removed while a live one's is left alone, and
SIGTERM while encoding leaves no file. (The 2026-11-24 attack report's findings N5, H5 and T4.)"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import bertkit
from bertkit.model import BertConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from model_helpers import TINY  # noqa: E402

SRC = Path(bertkit.__file__).resolve().parents[1]  # the code under test, for the test that runs a subprocess


def _frozen_head(**config: object):  # noqa: ANN202 (BertForFrozenTokenClassification)
    from bertkit.model.heads import BertForFrozenTokenClassification

    torch.manual_seed(0)
    settings = {"frozen_features": "last", "tagger": "linear"}
    return BertForFrozenTokenClassification(BertConfig(**{**TINY, **config}, task_settings=settings)).eval()


def _features(n: int = 6) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"input_ids": [2, *rng.integers(5, 99, size=3 + i % 5).tolist(), 3], "token_type_ids": [0] * (5 + i % 5)}
            for i in range(n)]


def test_the_cache_key_covers_the_config(tmp_path: Path) -> None:
    """N5: the same weights with another activation are another encoder: another cache file, other features."""
    from bertkit.tasks.feature_cache import CACHED_KEY, cache_key, with_cached_layers

    gelu = _frozen_head()
    relu = _frozen_head(hidden_act="relu")
    relu.load_state_dict(gelu.state_dict())
    features = _features()
    assert cache_key(gelu, features) != cache_key(relu, features)
    a = with_cached_layers(gelu, features, tmp_path)
    b = with_cached_layers(relu, features, tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 2
    assert not np.allclose(np.asarray(a[0][CACHED_KEY][:, -1]), np.asarray(b[0][CACHED_KEY][:, -1]))
    other_tagger = _frozen_head()  # the head's own settings do not change the features: the file is shared
    other_tagger.config.task_settings = {"frozen_features": "weighted_sum", "tagger": "bilstm"}
    other_tagger.config.num_labels = 5
    assert cache_key(other_tagger, features) == cache_key(gelu, features)


def _damage_zeroed(path: Path) -> None:
    with open(path, "r+b") as f:  # zeroed in place: same size, same header
        f.seek(128)
        f.write(bytes(path.stat().st_size - 128))


def _damage_truncated(path: Path) -> None:
    os.truncate(path, 200)


def _damage_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def _damage_object_array(path: Path) -> None:
    np.save(path, np.array([{"x": 1}], dtype=object), allow_pickle=True)


@pytest.mark.parametrize("damage", [_damage_zeroed, _damage_truncated, _damage_garbage, _damage_object_array])
def test_a_damaged_cache_file_is_computed_again(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                damage) -> None:  # noqa: ANN001
    """N5 / T4: a cache file zeroed in place, truncated, replaced by garbage or by an object array is not used
    (silently, or with a ValueError traceback): its sha256 no longer matches its record, so it is computed again
    with a warning naming the file; the features equal the first ones."""
    from bertkit.tasks.feature_cache import CACHED_KEY, with_cached_layers

    head, features = _frozen_head(), _features()
    first = [np.array(f[CACHED_KEY]) for f in with_cached_layers(head, features, tmp_path)]
    (path,) = tmp_path.glob("*.npy")
    damage(path)
    with caplog.at_level(logging.WARNING, logger="bertkit.tasks.feature_cache"):
        again = with_cached_layers(head, features, tmp_path)
    assert f"{path}: damaged cache file" in caplog.text and "computing the features again" in caplog.text
    for f, expected in zip(again, first):
        np.testing.assert_array_equal(np.asarray(f[CACHED_KEY]), expected)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bertkit.tasks.feature_cache"):
        with_cached_layers(head, features, tmp_path)  # intact again: reused
    assert "reusing the cached encoder features" in caplog.text and "damaged cache file" not in caplog.text


def test_temporary_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    """H5: a temporary cache file left by a killed run (kill -9: unlocked, not fresh) is removed by the next run;
    one a live run is writing (it holds the file's lock) is left alone, so two runs can share one cache."""
    import fcntl

    from bertkit.tasks.feature_cache import with_cached_layers

    head, features = _frozen_head(), _features()
    dead = tmp_path / f".{'a' * 64}.npy.x1y2z3.tmp"
    live = tmp_path / f".{'b' * 64}.npy.q7r8s9.tmp"
    other = tmp_path / ".notes.tmp"  # not a cache file's name: not ours to remove
    for p in (dead, live, other):
        p.write_bytes(b"\0" * 4096)
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with_cached_layers(head, features, tmp_path)
        assert not dead.exists() and live.exists() and other.exists()


_SIGTERM_SCRIPT = """
import sys, time
import numpy as np, torch
from bertkit.errors import Interrupted
from bertkit.model import BertConfig
from bertkit.model.heads import BertForFrozenTokenClassification
from bertkit.tasks import feature_cache

forward = feature_cache._LayerFeatures.forward
def slow(self, *args, **kwargs):
    time.sleep(0.2)
    return forward(self, *args, **kwargs)
feature_cache._LayerFeatures.forward = slow
head = BertForFrozenTokenClassification(BertConfig(**{tiny}, task_settings={{"frozen_features": "last"}}))
features = [{{"input_ids": [2, 7, 8, 3], "token_type_ids": [0] * 4}} for _ in range(64 * 100)]
print("encoding", flush=True)
try:
    feature_cache.with_cached_layers(head, features, sys.argv[1])
except Interrupted as e:
    print(e, file=sys.stderr)
    sys.exit(128 + e.signal)
"""


def test_sigterm_during_encoding_removes_the_temporary_file(tmp_path: Path) -> None:
    """H5: SIGTERM while the cache is being encoded stops with exit code 143 and a message, leaving no file."""
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", _SIGTERM_SCRIPT.format(tiny=TINY), str(cache)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(SRC)})
    try:
        deadline = time.time() + 60
        while not list(cache.glob(".*.tmp")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert list(cache.glob(".*.tmp")), "the encoding never started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "stopped by signal 15 while encoding the frozen features; the partial cache file was removed" in err
    assert list(cache.iterdir()) == []
