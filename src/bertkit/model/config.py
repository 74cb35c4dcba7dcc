"""BertConfig: the model's hyper-parameters, with the paper's defaults, readable from a Hugging Face config.json."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.dataclass_io import Config, spec
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
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
POOLER_ACTIVATIONS = ("tanh", "gelu", "relu")
# The Hugging Face layouts a model is read from and written to (bertkit.model.families holds the names of each).
FAMILIES = ("bert", "distilbert", "roberta", "xlm-roberta", "albert", "electra")
# Size bounds far above every published encoder (XLM-R's 250k vocabulary, BERT-large's 24 x 1024, 8k positions)
# and far below what would make allocating the model the way a config.json that lies about its sizes fails.
MAX_VOCAB = 2**22
MAX_WIDTH = 2**16
MAX_LAYERS = 512
MAX_POSITIONS = 2**20
# A LayerNorm divides by sqrt(var + eps): a negative eps makes that NaN for every vector of variance below |eps|, 0
# divides a constant vector by zero, and a large one (0.9) flattens every vector towards the same one, so that every
# text embeds alike. Published BERTs use 1e-12 (BERT, ALBERT, ELECTRA) to 1e-5 (RoBERTa, XLM-R).
LAYER_NORM_EPS_WHY = "published BERTs use 1e-12 to 1e-5; a larger eps makes every text embed alike"

# Hugging Face's other names of the tanh GELU (the names of ACTIVATIONS are read as they are).
_ACT_ALIASES = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def _is_int(value: Any) -> bool:
    """An integer that is not a bool (JSON true would otherwise count as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class BertConfig(Config):
    """Hyper-parameters of a BERT model; defaults are BERT-base's (Devlin et al. 2019, section 3 and appendix A.2)."""

    vocab_size: int = spec(30522, ge=1, le=MAX_VOCAB)
    """Size of the WordPiece vocabulary (bert-base-uncased has 30,522)."""
    hidden_size: int = spec(768, ge=1, le=MAX_WIDTH)
    """Width H of every token representation."""
    num_hidden_layers: int = spec(12, ge=1, le=MAX_LAYERS)
    """Number L of Transformer encoder layers."""
    num_attention_heads: int = spec(12, ge=1, le=MAX_WIDTH)
    """Number A of self-attention heads; must divide hidden_size."""
    intermediate_size: int = spec(3072, ge=1, le=4 * MAX_WIDTH)
    """Width of the feed-forward layer (4H in the paper)."""
    hidden_act: str = spec("gelu", choices=ACTIVATIONS)
    """Feed-forward activation: 'gelu' (exact, erf) as in the original code, 'gelu_tanh', or 'relu'."""
    hidden_dropout_prob: float = spec(0.1, ge=0, lt=1)
    """Dropout on embeddings and on every sub-layer output (paper: 0.1)."""
    attention_probs_dropout_prob: float = spec(0.1, ge=0, lt=1)
    """Dropout on the attention probabilities (paper: 0.1)."""
    max_position_embeddings: int = spec(512, ge=1, le=MAX_POSITIONS)
    """Longest sequence the learned position embeddings cover."""
    type_vocab_size: int = spec(2, ge=0, le=2**16)
    """Number of segment (token type) ids: 2 for BERT's A and B. 1: one segment row added to every token, whatever
    token_type_ids say (RoBERTa, XLM-R). 0: no segment embeddings at all (DistilBERT)."""
    initializer_range: float = spec(0.02, gt=0, lt=1, why="BERT uses 0.02")
    """Standard deviation of the truncated-normal-like init (the reference uses N(0, 0.02))."""
    layer_norm_eps: float = spec(1e-12, gt=0, le=1e-3, why=LAYER_NORM_EPS_WHY)
    """LayerNorm epsilon of the reference implementation."""
    pad_token_id: int = spec(0, ge=0, le=MAX_VOCAB)
    """Id of [PAD] in the vocabulary."""
    padding_aware_positions: bool = False
    """RoBERTa's position ids (fairseq's make_positions, as transformers computes them): the real tokens of a
    sequence count up from pad_token_id + 1, skipping the pad tokens, which take position pad_token_id. The first
    pad_token_id + 1 rows of the position table are then never a real token's, so the longest sequence is
    max_position_embeddings - pad_token_id - 1 (514 rows, pad 1: 512 tokens). False: positions 0, 1, 2, ... (BERT)."""
    layer_norm_position: str = spec("post", choices=LAYER_NORM_POSITIONS)
    """'post' (the paper: LayerNorm(x + sublayer(x))) or 'pre' (x + sublayer(LayerNorm(x)), plus one LayerNorm
    after the last layer; Xiong et al. 2020). Pre-LN trains stably at higher learning rates, which is why
    Cramming (Geiping & Goldstein 2022) uses it for pre-training on a small budget. A bertkit option:
    transformers' BertModel is post-LN only (see `bert_compatible`)."""
    alibi: bool = False
    """Attention with Linear Biases (Press et al. 2022; in a bidirectional encoder, MosaicBERT, Portes et al.
    2023): head h adds -m_h * |i - j| to the score of query i for key j, with slopes m_h = 2**(-8h/A). Attention
    then starts out local instead of uniform, which is the structure masked LM must otherwise discover before
    its loss leaves the unigram plateau. The learned absolute positions stay. A bertkit option."""
    embedding_size: int | None = spec(None, ge=1, le=MAX_WIDTH)
    """ALBERT's factorised embedding (Lan et al. 2020): word, position and segment embeddings of this size E, then
    one E -> hidden projection, and the masked-LM head maps back to E before the (tied) vocabulary decoder; the
    vocabulary costs V x E + E x H parameters instead of V x H. None = hidden_size (BERT). A bertkit option."""
    share_layers: bool = False
    """ALBERT's cross-layer parameter sharing: one encoder layer's weights applied num_hidden_layers times (the same
    compute, 1/L of the encoder's parameters). A bertkit option."""
    pooling: str = spec("cls", choices=POOLINGS)
    """What the pooler reads: 'cls' (the paper: tanh(W h_[CLS] + b)) or 'mean' (tanh(W mean_i h_i + b) over the
    real tokens). A model pre-trained by masked LM alone never trains its [CLS] vector, while every token's vector
    is trained; 'mean' lets a sentence-level head start from those. A bertkit option (transformers' BertModel
    pools [CLS] only)."""
    pooler_act: str = spec("tanh", choices=POOLER_ACTIVATIONS)
    """The non-linearity of the dense layer on the first token that sentence-level heads read (BertPooler):
    'tanh' (BERT, ALBERT, RoBERTa), 'gelu' (exact; ELECTRA's classification head) or 'relu' (DistilBERT's
    pre_classifier)."""
    mlm_act: str | None = spec(None, choices=ACTIVATIONS)
    """The masked-LM transform's activation; None: hidden_act (BERT, ALBERT, DistilBERT). RoBERTa's and ELECTRA's
    generator's heads apply exact GELU whatever hidden_act says."""
    family: str = spec("bert", choices=FAMILIES)
    """The Hugging Face layout the model is read from and written to: config.json's keys and model_type, the
    tensor names (`bertkit.model.families`). The architecture itself is set by the fields above; a folder is
    written in its family's layout when that family's classes compute what these fields say, else in bertkit's
    own (model_type 'bertkit')."""
    # --- task head settings (saved with a fine-tuned model) ---
    num_labels: int = spec(2, ge=1, le=MAX_VOCAB)
    """Output size of classification and tagging heads."""
    label_names: list[str] | None = spec(None)
    """Names of the labels in id order; written as id2label/label2id in config.json."""
    problem_type: str | None = spec(None, choices=PROBLEM_TYPES)
    """Sequence classification loss: 'single_label_classification', 'multi_label_classification', 'regression'."""
    classifier_dropout: float | None = spec(None, ge=0, lt=1)
    """Dropout before a task head; None means hidden_dropout_prob, as in the reference."""
    tabular_inputs: dict[str, Any] | None = None
    """Non-text inputs a sequence classifier concatenates with the pooled [CLS] vector before its linear layer:
    {"numeric": floats per example, "categories": [vocabulary size of each categorical column], "embedding_size":
    width of each category embedding}. None: text only. A bertkit option (the folder is not transformers')."""
    frozen_tagger: dict[str, Any] | None = None
    """The feature-based tagger's sizes (BertForFrozenTokenClassification; fields of
    `bertkit.model.heads.FrozenTaggerSettings`: frozen_features, tagger, tagger_hidden, tagger_dropout). None on
    other heads (and in frozen folders written before this field, whose task_settings hold them). A bertkit option."""
    task: str | None = spec(None)
    """The bertkit task a fine-tuned folder was trained for ('classification', 'ner', 'qa', ...)."""
    task_settings: dict[str, Any] = field(default_factory=dict)
    """Task-specific settings stored with the model (max length, label scheme, doc stride, ...)."""

    def __post_init__(self) -> None:
        if isinstance(self.hidden_act, str):
            self.hidden_act = _ACT_ALIASES.get(self.hidden_act, self.hidden_act)
        super().__post_init__()

    def validate(self) -> None:
        """The rules between fields (each field's own range is declared beside it)."""
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                              f"num_attention_heads ({self.num_attention_heads})")
        if self.pad_token_id >= self.vocab_size:
            raise ConfigError(f"BertConfig.pad_token_id: expected a token id in 0..{self.vocab_size - 1} "
                              f"(vocab_size {self.vocab_size}), found {self.pad_token_id!r}")
        if self.max_sequence_length < 1:
            raise ConfigError(f"BertConfig.max_position_embeddings ({self.max_position_embeddings}) leaves no "
                              f"position for a token: with padding_aware_positions the first pad_token_id + 1 = "
                              f"{self.pad_token_id + 1} rows are never a real token's")
        if self.tabular_inputs is not None:
            t = self.tabular_inputs
            if not (set(t) <= {"numeric", "categories", "embedding_size"}
                    and _is_int(t.get("numeric", 0)) and 0 <= t.get("numeric", 0) <= MAX_WIDTH
                    and isinstance(t.get("categories", []), list)
                    and all(_is_int(n) and 0 < n <= MAX_VOCAB for n in t.get("categories", []))
                    and _is_int(t.get("embedding_size", 1)) and 0 < t.get("embedding_size", 1) <= MAX_WIDTH):
                raise ConfigError("BertConfig.tabular_inputs must be {numeric: int, categories: [positive ints], "
                                  f"embedding_size: positive int}}, got {t!r}")
        if self.label_names is not None and len(self.label_names) != self.num_labels:
            raise ConfigError(f"BertConfig.label_names has {len(self.label_names)} names but num_labels is "
                              f"{self.num_labels}")

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
        return not self.bertkit_options()

    def bertkit_options(self) -> list[str]:
        """The options on in this config that transformers' BertModel does not have, each said in words (empty for
        a BERT that transformers computes the same)."""
        on = (("pre-LN blocks (layer_norm_position 'pre')", self.layer_norm_position == "pre"),
              ("ALiBi attention biases (alibi true)", self.alibi),
              ("mean pooling (pooling 'mean')", self.pooling == "mean"),
              ("ALBERT's factorised embedding (embedding_size)", self.embedding_width != self.hidden_size),
              ("ALBERT's cross-layer sharing (share_layers)", self.share_layers),
              ("non-text columns beside the text (tabular_inputs)", bool(self.tabular_inputs)),
              ("no segment embeddings (type_vocab_size 0)", self.type_vocab_size == 0),
              ("RoBERTa's position ids (padding_aware_positions)", self.padding_aware_positions),
              (f"a {self.pooler_act} pooler (pooler_act)", self.pooler_act != "tanh"),
              (f"a {self.mlm_act} masked-LM transform (mlm_act)", self.mlm_act not in (None, self.hidden_act)))
        return [words for words, flag in on if flag]

    @property
    def max_sequence_length(self) -> int:
        """The longest sequence the position table covers: max_position_embeddings, less the pad_token_id + 1 rows
        RoBERTa's position ids never give a real token (padding_aware_positions)."""
        offset = self.pad_token_id + 1 if self.padding_aware_positions else 0
        return self.max_position_embeddings - offset

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
        added by hand or by a newer bertkit). A config.json of the BERT family (distilbert, roberta, xlm-roberta,
        albert, electra) is read through its adapter (`bertkit.model.families`); any other model type is refused."""
        model_type = d.get("model_type", "bert")
        if model_type not in ("bert", BERTKIT_MODEL_TYPE, *FAMILIES):
            raise ConfigError(f"{source}: model_type is {model_type!r}, expected 'bert', "
                              f"{', '.join(repr(f) for f in FAMILIES[1:])} (or '{BERTKIT_MODEL_TYPE}')")
        check_config_keys(d, source)
        known = {f.name for f in dataclasses.fields(cls)}
        if model_type in FAMILIES[1:]:
            from bertkit.model import families

            kwargs = {k: d[k] for k in TASK_FIELDS if k in d} | families.config_fields(d, source)
        else:
            kwargs = {k: v for k, v in d.items() if k in known}
        if "label_names" not in d and "id2label" in d:
            kwargs["label_names"] = _id2label_names(d["id2label"], source)
            kwargs.setdefault("num_labels", len(kwargs["label_names"]))
        try:
            return cls(**kwargs)
        except (TypeError, ConfigError) as e:
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
# What a family's config.json (bertkit.model.families) carries of bertkit's own besides its architecture.
TASK_FIELDS = ("num_labels", "label_names", "problem_type", "task", "task_settings")
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
