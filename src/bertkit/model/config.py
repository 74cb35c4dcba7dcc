"""BertConfig: the model's hyper-parameters, with the paper's defaults, readable from a Hugging Face config.json."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import ConfigError
from bertkit.io import atomic_write_json, read_json_object

logger = logging.getLogger(__name__)

# Sizes from the paper (BERT-base, BERT-large) and from Turc et al. 2019, "Well-Read Students Learn Better"
# (the 24 compact models google-research/bert released: tiny, mini, small, medium).
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8),
    "medium": dict(num_hidden_layers=8, hidden_size=512, num_attention_heads=8),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16),
}

# config.json's model_type for a model with a bertkit-only architecture option (pre-LN, ALiBi): not 'bert', so
# transformers does not load it as a BERT that computes something else.
BERTKIT_MODEL_TYPE = "bertkit"
LAYER_NORM_POSITIONS = ("post", "pre")
POOLINGS = ("cls", "mean")  # what BertPooler reads
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")  # as transformers'

# Activation names as Hugging Face configs spell them, mapped to bertkit's two GELUs.
_ACT_ALIASES = {
    "gelu": "gelu",
    "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


def _is_int(value: Any) -> bool:
    """An integer that is not a bool (JSON true would otherwise count as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float that is not a bool: NaN and infinity make no sense in any config field."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class BertConfig:
    """Hyper-parameters of a BERT model; defaults are BERT-base's (Devlin et al. 2019, section 3 and appendix A.2)."""

    vocab_size: int = 30522
    """Size of the WordPiece vocabulary (bert-base-uncased has 30,522)."""
    hidden_size: int = 768
    """Width H of every token representation."""
    num_hidden_layers: int = 12
    """Number L of Transformer encoder layers."""
    num_attention_heads: int = 12
    """Number A of self-attention heads; must divide hidden_size."""
    intermediate_size: int = 3072
    """Width of the feed-forward layer (4H in the paper)."""
    hidden_act: str = "gelu"
    """Feed-forward activation: 'gelu' (exact, erf) as in the original code, 'gelu_tanh', or 'relu'."""
    hidden_dropout_prob: float = 0.1
    """Dropout on embeddings and on every sub-layer output (paper: 0.1)."""
    attention_probs_dropout_prob: float = 0.1
    """Dropout on the attention probabilities (paper: 0.1)."""
    max_position_embeddings: int = 512
    """Longest sequence the learned position embeddings cover."""
    type_vocab_size: int = 2
    """Number of segment (token type) ids: A and B."""
    initializer_range: float = 0.02
    """Standard deviation of the truncated-normal-like init (the reference uses N(0, 0.02))."""
    layer_norm_eps: float = 1e-12
    """LayerNorm epsilon of the reference implementation."""
    pad_token_id: int = 0
    """Id of [PAD] in the vocabulary."""
    layer_norm_position: str = "post"
    """'post' (the paper: LayerNorm(x + sublayer(x))) or 'pre' (x + sublayer(LayerNorm(x)), plus one LayerNorm
    after the last layer; Xiong et al. 2020). Pre-LN trains stably at higher learning rates, which is why
    Cramming (Geiping & Goldstein 2022) uses it for pre-training on a small budget. A bertkit option:
    transformers' BertModel is post-LN only (see `bert_compatible`)."""
    alibi: bool = False
    """Attention with Linear Biases (Press et al. 2022; in a bidirectional encoder, MosaicBERT, Portes et al.
    2023): head h adds -m_h * |i - j| to the score of query i for key j, with slopes m_h = 2**(-8h/A). Attention
    then starts out local instead of uniform, which is the structure masked LM must otherwise discover before
    its loss leaves the unigram plateau. The learned absolute positions stay. A bertkit option."""
    embedding_size: int | None = None
    """ALBERT's factorised embedding (Lan et al. 2020): word, position and segment embeddings of this size E, then
    one E -> hidden projection, and the masked-LM head maps back to E before the (tied) vocabulary decoder; the
    vocabulary costs V x E + E x H parameters instead of V x H. None = hidden_size (BERT). A bertkit option."""
    share_layers: bool = False
    """ALBERT's cross-layer parameter sharing: one encoder layer's weights applied num_hidden_layers times (the same
    compute, 1/L of the encoder's parameters). A bertkit option."""
    pooling: str = "cls"
    """What the pooler reads: 'cls' (the paper: tanh(W h_[CLS] + b)) or 'mean' (tanh(W mean_i h_i + b) over the
    real tokens). A model pre-trained by masked LM alone never trains its [CLS] vector, while every token's vector
    is trained; 'mean' lets a sentence-level head start from those. A bertkit option (transformers' BertModel
    pools [CLS] only)."""
    # --- task head settings (saved with a fine-tuned model) ---
    num_labels: int = 2
    """Output size of classification and tagging heads."""
    label_names: list[str] | None = None
    """Names of the labels in id order; written as id2label/label2id in config.json."""
    problem_type: str | None = None
    """Sequence classification loss: 'single_label_classification', 'multi_label_classification', 'regression'."""
    classifier_dropout: float | None = None
    """Dropout before a task head; None means hidden_dropout_prob, as in the reference."""
    tabular_inputs: dict[str, Any] | None = None
    """Non-text inputs a sequence classifier concatenates with the pooled [CLS] vector before its linear layer:
    {"numeric": floats per example, "categories": [vocabulary size of each categorical column], "embedding_size":
    width of each category embedding}. None: text only. A bertkit option (the folder is not transformers')."""
    frozen_tagger: dict[str, Any] | None = None
    """The feature-based tagger's sizes (BertForFrozenTokenClassification; fields of
    `bertkit.model.heads.FrozenTaggerSettings`: frozen_features, tagger, tagger_hidden, tagger_dropout). None on
    other heads (and in frozen folders written before this field, whose task_settings hold them). A bertkit option."""
    task: str | None = None
    """The bertkit task a fine-tuned folder was trained for ('classification', 'ner', 'qa', ...)."""
    task_settings: dict[str, Any] = field(default_factory=dict)
    """Task-specific settings stored with the model (max length, label scheme, doc stride, ...)."""

    def __post_init__(self) -> None:
        self.hidden_act = _ACT_ALIASES.get(self.hidden_act, self.hidden_act)
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the field if a value is out of range or of the wrong type."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size", "num_labels"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise ConfigError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ("gelu", "gelu_tanh", "relu"):
            raise ConfigError(f"BertConfig.hidden_act must be one of gelu, gelu_tanh, relu; got {self.hidden_act!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if name == "classifier_dropout" and value is None:
                continue
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise ConfigError(f"BertConfig.{name} must be a probability in [0, 1), got {value!r}")
        # A LayerNorm divides by sqrt(var + eps): a negative eps makes that NaN for every vector of variance below
        # |eps|, and 0 divides a constant vector by zero. Published BERTs use 1e-12 to 1e-5.
        if not _is_number(self.layer_norm_eps) or not 0.0 < self.layer_norm_eps < 1.0:
            raise ConfigError(f"BertConfig.layer_norm_eps must be a small positive number (BERT uses 1e-12), "
                              f"got {self.layer_norm_eps!r}")
        if not _is_number(self.initializer_range) or not 0.0 < self.initializer_range < 1.0:
            raise ConfigError(f"BertConfig.initializer_range must be a positive standard deviation below 1 (BERT "
                              f"uses 0.02), got {self.initializer_range!r}")
        if not _is_int(self.pad_token_id) or not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"BertConfig.pad_token_id must be a token id in 0..{self.vocab_size - 1} "
                              f"(vocab_size {self.vocab_size}), got {self.pad_token_id!r}")
        for name in ("alibi", "share_layers"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"BertConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.layer_norm_position not in LAYER_NORM_POSITIONS:
            raise ConfigError(f"BertConfig.layer_norm_position must be 'post' or 'pre', got {self.layer_norm_position!r}")
        if self.embedding_size is not None and (not _is_int(self.embedding_size) or self.embedding_size < 1):
            raise ConfigError(f"BertConfig.embedding_size must be a positive integer or null, got {self.embedding_size!r}")
        if self.pooling not in POOLINGS:
            raise ConfigError(f"BertConfig.pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"BertConfig.problem_type must be one of {', '.join(PROBLEM_TYPES)} or null, "
                              f"got {self.problem_type!r}")
        if self.tabular_inputs is not None:
            t = self.tabular_inputs
            if not (isinstance(t, dict) and set(t) <= {"numeric", "categories", "embedding_size"}
                    and _is_int(t.get("numeric", 0)) and t.get("numeric", 0) >= 0
                    and isinstance(t.get("categories", []), list)
                    and all(_is_int(n) and n > 0 for n in t.get("categories", []))
                    and _is_int(t.get("embedding_size", 1)) and t.get("embedding_size", 1) > 0):
                raise ConfigError("BertConfig.tabular_inputs must be {numeric: int, categories: [positive ints], "
                                  f"embedding_size: positive int}}, got {t!r}")
        if self.frozen_tagger is not None and not isinstance(self.frozen_tagger, dict):
            raise ConfigError(f"BertConfig.frozen_tagger must be a mapping of the frozen tagger's settings or null, "
                              f"got {self.frozen_tagger!r}")
        if self.label_names is not None:
            if not isinstance(self.label_names, list) or not all(isinstance(n, str) for n in self.label_names):
                raise ConfigError(f"BertConfig.label_names must be a list of strings, got {self.label_names!r}")
            if len(self.label_names) != self.num_labels:
                raise ConfigError(
                    f"BertConfig.label_names has {len(self.label_names)} names but num_labels is {self.num_labels}"
                )
        if not isinstance(self.task_settings, dict):
            raise ConfigError(f"BertConfig.task_settings must be a mapping, got {self.task_settings!r}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BertConfig":
        """A config for one of the published sizes: tiny, mini, small, medium, base, large."""
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; expected one of {', '.join(PRESETS)}")
        sizes = dict(PRESETS[name])
        sizes["intermediate_size"] = 4 * sizes["hidden_size"]
        sizes.update(overrides)
        return cls(**sizes)

    @property
    def bert_compatible(self) -> bool:
        """Whether transformers' BertModel computes the same function (no bertkit-only architecture option).

        A folder of an incompatible model is written with model_type 'bertkit', and `bertkit convert --to-hf`
        refuses it."""
        return (self.layer_norm_position == "post" and not self.alibi and self.pooling == "cls"
                and self.embedding_width == self.hidden_size and not self.share_layers and not self.tabular_inputs)

    @property
    def embedding_width(self) -> int:
        """E: the width of the embeddings (hidden_size unless ALBERT's factorised embedding is on)."""
        return self.embedding_size or self.hidden_size

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    # --- serialisation -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in Hugging Face's config.json layout plus bertkit's own fields."""
        d = dataclasses.asdict(self)
        d["model_type"] = "bert" if self.bert_compatible else BERTKIT_MODEL_TYPE
        d["position_embedding_type"] = "absolute"
        if self.label_names is not None:
            d["id2label"] = {str(i): name for i, name in enumerate(self.label_names)}
            d["label2id"] = {name: i for i, name in enumerate(self.label_names)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> "BertConfig":
        """Build a config from a dict (bertkit's or a Hugging Face config.json).

        Keys that would make the model compute something bertkit does not implement (rotary or relative positions,
        a decoder) are refused; other unknown keys are ignored, as Hugging Face configs carry many harmless ones,
        with one warning when the folder is bertkit's own (bertkit wrote every key it reads, so an extra one was
        added by hand or by a newer bertkit). A config.json of another model type (roberta, ...) is refused."""
        if d.get("model_type", "bert") not in ("bert", BERTKIT_MODEL_TYPE):
            raise ConfigError(f"{source}: model_type is {d['model_type']!r}, expected 'bert' "
                              f"(or '{BERTKIT_MODEL_TYPE}')")
        check_config_keys(d, source)
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        if "label_names" not in d and "id2label" in d:
            kwargs["label_names"] = _id2label_names(d["id2label"], source)
            kwargs.setdefault("num_labels", len(kwargs["label_names"]))
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise ConfigError(f"{source}: {e}") from None
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def save(self, path: str | Path) -> None:
        """Write config.json atomically."""
        atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "BertConfig":
        """Read a config.json (bertkit's or Hugging Face's)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"{path}: no such file (expected a BERT config.json)")
        return cls.from_dict(read_json_object(path, ConfigError), source=str(path))


# --- config.json keys bertkit does not read -----------------------------------------------------------------------

# Keys with the value a BERT has; any other value changes what the model computes in a way bertkit does not
# implement, so loading it as a plain BERT would give silently wrong outputs.
_BERT_VALUES: dict[str, tuple[Any, str]] = {
    # relative_key / relative_key_query: Shaw et al. 2018, Huang et al. 2020
    "position_embedding_type": ("absolute", "BERT's absolute learned positions"),
    "is_decoder": (False, "a bidirectional encoder (true means causal self-attention)"),
    "add_cross_attention": (False, "an encoder without the cross-attention layers of an encoder-decoder"),
}
# Rotary position embeddings (RoFormer, NomicBERT, JinaBERT, ModernBERT): a key naming them with a set value.
_ROTARY_MARKERS = ("rotary", "rope_", "use_rope")
# Keys bertkit writes into config.json besides the dataclass fields (to_dict, checkpoint.hf_config_dict).
WRITTEN_KEYS = frozenset({"model_type", "position_embedding_type", "id2label", "label2id", "architectures",
                          "tie_word_embeddings"})
_warned: set[tuple[str, tuple[str, ...]]] = set()  # (config.json, its unknown keys) already warned about


def check_config_keys(d: dict[str, Any], source: str) -> None:
    """Refuse keys that change the architecture beyond BERT's; warn once about unknown keys in a bertkit folder."""
    for key, (bert_value, meaning) in _BERT_VALUES.items():
        if key in d and d[key] not in (bert_value, None):
            raise ConfigError(f"{source}: {key} {d[key]!r} is not supported: bertkit implements {key} "
                              f"{bert_value!r} only ({meaning}), so this model would compute something else")
    rotary = sorted(k for k in d if any(m in k.lower() for m in _ROTARY_MARKERS) and d[k] not in (None, False, 0, ""))
    if rotary:
        raise ConfigError(f"{source}: {', '.join(f'{k} = {d[k]!r}' for k in rotary)} asks for rotary position "
                          "embeddings, which bertkit does not implement (it has BERT's absolute learned positions "
                          "and ALiBi)")
    if d.get("pruned_heads"):
        raise ConfigError(f"{source}: pruned_heads {d['pruned_heads']!r}: attention heads pruned from some layers "
                          "are not supported (bertkit's layers all have num_attention_heads heads)")
    known = {f.name for f in dataclasses.fields(BertConfig)} | WRITTEN_KEYS
    native = d.get("model_type") == BERTKIT_MODEL_TYPE or "layer_norm_position" in d  # written by bertkit
    unknown = tuple(sorted(set(d) - known))
    if native and unknown and (source, unknown) not in _warned:
        _warned.add((source, unknown))
        logger.warning("%s: ignoring key(s) bertkit does not know: %s (bertkit wrote this file without them: added "
                       "by hand, or by a newer bertkit whose option this version does not have?)", source,
                       ", ".join(unknown))


def _id2label_names(id2label: Any, source: str) -> list[str]:
    """Label names in id order from a Hugging Face id2label mapping ({"0": "neg", "1": "pos"})."""
    try:
        by_id = {int(k): v for k, v in id2label.items()}
        return [by_id[i] for i in range(len(by_id))]
    except (AttributeError, TypeError, ValueError, KeyError):
        raise ConfigError(f"{source}: id2label must map the ids 0..n-1 to label names, got {id2label!r}") from None
