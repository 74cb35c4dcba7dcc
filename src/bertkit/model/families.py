"""The BERT family's Hugging Face folders on bertkit's one model: DistilBERT, RoBERTa, XLM-R, ALBERT and ELECTRA.

This is the one adapter between those folders and bertkit, at the load/save boundary. Each family is BERT with a
few of BertConfig's options set (`Family.options`: no segment embeddings, RoBERTa's position ids, a factorised
embedding, one shared layer, the pooler's and the masked-LM transform's activations), its own config.json keys and
its own tensor names. Reading maps a folder's config.json to BertConfig fields (`config_fields`) and every tensor
name to bertkit's (`bertkit_names`); writing maps back (`hf_config`, `family_names`), so that a folder read and
saved again is the folder transformers wrote. What a family's classes cannot compute is refused by name
(`unexpressed`): such a model is written in bertkit's own layout instead.

Names are prefixes matched from the start of a tensor's name, '#' standing for a layer's index. BERT's own folders
need no adapter (their names are bertkit's). No torch here: names and dicts only, so that reading a config.json
stays light.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bertkit.errors import CheckpointError, ConfigError

BertConfig = Any  # bertkit.model.config.BertConfig, which reads config.json through this module (a floor below it)

Pairs = tuple[tuple[str, str], ...]
BASE = "bert."  # where bertkit's heads keep the encoder
_ENCODER_ROOTS = ("embeddings.", "encoder.")  # bertkit's encoder (the pooler is a head's part in most families)
# transformers' class name for each bertkit class, after the family's stem ("Roberta" + "ForMaskedLM").
_CLASS_SUFFIXES = {name: name.removeprefix("Bert") for name in (
    "BertModel", "BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification",
    "BertForQuestionAnswering", "BertForMultipleChoice")}
# The BERT keys of config.json that RoBERTa, XLM-R, ALBERT and ELECTRA spell as BERT does.
_BERT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
              "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")
# Options no family's classes have: a model with one of them on is written in bertkit's layout.
_BERTKIT_ONLY = {"layer_norm_position": "post", "alibi": False, "pooling": "cls", "tabular_inputs": None}
# transformers' spelling of bertkit's activations (ACT2FN names every family's classes read).
_HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


@functools.lru_cache(maxsize=None)
def _layer_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(re.escape(prefix).replace("\\#", "#").replace("#", r"(\d+)"))


def _rename(name: str, pairs: Pairs) -> str | None:
    """`name` with the first matching (from, to) prefix replaced (a '#' carries the layer index), or None."""
    for src, dst in pairs:
        m = _layer_pattern(src).match(name)
        if m:
            return (dst.replace("#", m.group(1)) if m.groups() else dst) + name[m.end():]
    return None


def _longest_first(pairs: Iterable[tuple[str, str]]) -> Pairs:
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


@dataclass(frozen=True)
class Family:
    """One Hugging Face model type as bertkit reads and writes it."""

    model_type: str
    """config.json's model_type."""
    stem: str
    """transformers' class-name stem: 'Roberta' names RobertaModel, RobertaForMaskedLM, ..."""
    prefix: str
    """Where transformers' heads keep the encoder ('roberta.'; bertkit's is 'bert.')."""
    options: dict[str, Any]
    """The BertConfig values this family's classes have (and cannot have otherwise)."""
    keys: dict[str, str]
    """BertConfig field -> the config.json key holding it."""
    encoder: Pairs
    """(family, bertkit) name prefixes inside the encoder, both without the heads' prefix."""
    heads: Pairs
    """(family, bertkit) name prefixes of the heads' own tensors, read and written."""
    placed: dict[str, tuple[tuple[str, str | None], ...]] = field(default_factory=dict)
    """bertkit class -> (bertkit, family) prefixes that class writes elsewhere than `encoder`/`heads` say (RoBERTa's
    sequence classifier keeps bertkit's pooler as classifier.dense); None: the family's class has no such tensor."""
    unwritten: tuple[str, ...] = ()
    """bertkit tensors this family's folders do not hold (a copy of another tensor they do not keep)."""
    extra_classes: dict[str, str] = field(default_factory=dict)
    """bertkit class -> transformers' class suffix, beyond the classes every family has."""
    written: dict[str, Any] = field(default_factory=dict)
    """config.json keys written with transformers' default value (no BertConfig field holds them)."""

    @property
    def classes(self) -> dict[str, str]:
        """bertkit class name -> transformers' class name."""
        return {k: self.stem + v for k, v in {**_CLASS_SUFFIXES, **self.extra_classes}.items()}

    def read_name(self, name: str) -> str | None:
        """bertkit's name of one of this family's tensors (the encoder's under 'bert.'), or None if it has none."""
        inner = name[len(self.prefix):] if name.startswith(self.prefix) else name
        mapped = _rename(inner, _longest_first(self.encoder))
        if mapped is not None:
            return BASE + mapped
        if inner != name:
            return None  # under the encoder's prefix, but no tensor of the encoder
        read = [(fam, bk) for pairs in self.placed.values() for bk, fam in pairs if fam is not None]
        return _rename(name, _longest_first([*self.heads, *read]))

    def write_name(self, name: str, class_name: str) -> str | None:
        """The family's name of a bertkit tensor in a model of `class_name` (None: not written)."""
        if name in self.unwritten:
            return None
        for bk, fam in self.placed.get(class_name, ()):
            if name.startswith(bk):
                return None if fam is None else fam + name[len(bk):]
        head_model = class_name != "BertModel"
        inner = name[len(BASE):] if head_model and name.startswith(BASE) else name
        if inner != name or not head_model:
            mapped = _rename(inner, _longest_first((bk, fam) for fam, bk in self.encoder))
            if mapped is not None:
                return (self.prefix if head_model else "") + mapped
        mapped = _rename(name, _longest_first((bk, fam) for fam, bk in self.heads))
        if mapped is None:
            raise CheckpointError(f"{name}: {class_name} has this tensor, which a {self.stem} folder has no place "
                                  "for; keep the model in bertkit's layout")
        return mapped


def _layer(family_prefix: str, bertkit_prefix: str, pairs: Pairs) -> Pairs:
    """(family, bertkit) pairs of one encoder layer's parts, under each side's layer prefix."""
    return tuple((family_prefix + f, bertkit_prefix + b) for f, b in pairs)


# BERT's own encoder names (RoBERTa, XLM-R, ELECTRA keep them).
_BERT_ENCODER: Pairs = (("embeddings.", "embeddings."), ("encoder.layer.#.", "encoder.layer.#."))
_POOLER: Pairs = (("pooler.", "pooler."),)
# Every family's token classifier, multiple-choice output and QA output are BERT's.
_TASK_HEADS: Pairs = (("classifier.", "classifier."), ("qa_outputs.", "qa_outputs."))
# RoBERTa's and ELECTRA's sequence classifiers: dense + activation + out_proj on the first token, which is bertkit's
# pooler and classifier; their other classes keep `classifier` as BERT does.
_CLASSIFICATION_HEAD = {"BertForSequenceClassification": (("bert.pooler.dense.", "classifier.dense."),
                                                          ("classifier.", "classifier.out_proj."))}

_ROBERTA = dict(
    prefix="roberta.",
    options=dict(padding_aware_positions=True, pooler_act="tanh", mlm_act="gelu", embedding_size=None,
                 share_layers=False),
    keys={k: k for k in (*_BERT_KEYS, "classifier_dropout")},
    encoder=_BERT_ENCODER + _POOLER,
    heads=(("lm_head.dense.", "cls.predictions.transform.dense."),
           ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
           ("lm_head.decoder.", "cls.predictions.decoder."), ("lm_head.bias", "cls.predictions.bias"), *_TASK_HEADS),
    placed=_CLASSIFICATION_HEAD,
    written=dict(bos_token_id=0, eos_token_id=2, position_embedding_type="absolute"),
)

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family(model_type="roberta", stem="Roberta", **_ROBERTA),
    Family(model_type="xlm-roberta", stem="XLMRoberta", **_ROBERTA),
    Family(
        model_type="distilbert", stem="DistilBert", prefix="distilbert.",
        options=dict(type_vocab_size=0, padding_aware_positions=False, pooler_act="relu", mlm_act=None,
                     layer_norm_eps=1e-12, embedding_size=None, share_layers=False),
        keys=dict(vocab_size="vocab_size", hidden_size="dim", num_hidden_layers="n_layers",
                  num_attention_heads="n_heads", intermediate_size="hidden_dim", hidden_act="activation",
                  hidden_dropout_prob="dropout", attention_probs_dropout_prob="attention_dropout",
                  max_position_embeddings="max_position_embeddings", initializer_range="initializer_range",
                  pad_token_id="pad_token_id", classifier_dropout="seq_classif_dropout"),
        encoder=(("embeddings.", "embeddings."),
                 *_layer("transformer.layer.#.", "encoder.layer.#.", (
                     ("attention.q_lin.", "attention.self.query."), ("attention.k_lin.", "attention.self.key."),
                     ("attention.v_lin.", "attention.self.value."), ("attention.out_lin.", "attention.output.dense."),
                     ("sa_layer_norm.", "attention.output.LayerNorm."), ("ffn.lin1.", "intermediate.dense."),
                     ("ffn.lin2.", "output.dense."), ("output_layer_norm.", "output.LayerNorm.")))),
        heads=(("vocab_transform.", "cls.predictions.transform.dense."),
               ("vocab_layer_norm.", "cls.predictions.transform.LayerNorm."),
               ("vocab_projector.weight", "cls.predictions.decoder.weight"),
               ("vocab_projector.bias", "cls.predictions.bias"), *_TASK_HEADS),
        # DistilBERT's sentence-level heads: pre_classifier + ReLU on the first token, bertkit's pooler (relu)
        placed={"BertForSequenceClassification": (("bert.pooler.dense.", "pre_classifier."),),
                "BertForMultipleChoice": (("bert.pooler.dense.", "pre_classifier."),),
                "BertModel": (("pooler.", None),)},
        unwritten=("cls.predictions.decoder.bias",),
        written=dict(qa_dropout=0.1, sinusoidal_pos_embds=False),
    ),
    Family(
        model_type="albert", stem="Albert", prefix="albert.",
        options=dict(padding_aware_positions=False, pooler_act="tanh", mlm_act=None),
        keys={**{k: k for k in (*_BERT_KEYS, "embedding_size")}, "classifier_dropout": "classifier_dropout_prob"},
        encoder=(("embeddings.", "embeddings."), ("encoder.embedding_hidden_mapping_in.", "embeddings.projection."),
                 *_layer("encoder.albert_layer_groups.#.albert_layers.0.", "encoder.layer.#.", (
                     ("attention.query.", "attention.self.query."), ("attention.key.", "attention.self.key."),
                     ("attention.value.", "attention.self.value."), ("attention.dense.", "attention.output.dense."),
                     ("attention.LayerNorm.", "attention.output.LayerNorm."), ("ffn.", "intermediate.dense."),
                     ("ffn_output.", "output.dense."), ("full_layer_layer_norm.", "output.LayerNorm."))),
                 ("pooler.", "pooler.dense.")),
        heads=(("predictions.dense.", "cls.predictions.transform.dense."),
               ("predictions.LayerNorm.", "cls.predictions.transform.LayerNorm."),
               ("predictions.decoder.", "cls.predictions.decoder."), ("predictions.bias", "cls.predictions.bias"),
               ("sop_classifier.classifier.", "cls.seq_relationship."), *_TASK_HEADS),
        extra_classes={"BertForPreTraining": "ForPreTraining"},  # masked LM + sentence order (SOP) on the pooler
        written=dict(inner_group_num=1, bos_token_id=2, eos_token_id=3, position_embedding_type="absolute"),
    ),
    Family(
        model_type="electra", stem="Electra", prefix="electra.",
        options=dict(padding_aware_positions=False, pooler_act="gelu", mlm_act="gelu", share_layers=False),
        keys={k: k for k in (*_BERT_KEYS, "embedding_size", "classifier_dropout")},
        encoder=(("embeddings_project.", "embeddings.projection."), *_BERT_ENCODER),
        heads=(("generator_predictions.dense.", "cls.predictions.transform.dense."),
               ("generator_predictions.LayerNorm.", "cls.predictions.transform.LayerNorm."),
               ("generator_lm_head.weight", "cls.predictions.decoder.weight"),
               ("generator_lm_head.bias", "cls.predictions.bias"),
               ("discriminator_predictions.", "discriminator_predictions."), *_TASK_HEADS),
        # the multiple-choice head's sequence_summary: dense + GELU on the first token, bertkit's pooler (gelu)
        placed={**_CLASSIFICATION_HEAD,
                "BertForMultipleChoice": (("bert.pooler.dense.", "sequence_summary.summary."),),
                "BertModel": (("pooler.", None),)},
        unwritten=("cls.predictions.decoder.bias",),
        extra_classes={"BertForReplacedTokenDetection": "ForPreTraining"},  # the discriminator
        written=dict(summary_type="first", summary_use_proj=True, summary_activation="gelu", summary_last_dropout=0.1,
                     position_embedding_type="absolute"),
    ),
)}
# Families whose base model (transformers' XModel) has no pooler: bertkit builds their BertModel without one.
NO_BASE_POOLER = frozenset(name for name, f in FAMILIES.items() if ("pooler.", None) in f.placed.get("BertModel", ()))
# config.json values ELECTRA's multiple-choice head must have to be the pooler bertkit has (its defaults).
_ELECTRA_SUMMARY = {"summary_type": "first", "summary_use_proj": True, "summary_activation": "gelu"}


def family(name: str) -> Family:
    """The Family of a model_type (a ConfigError names the ones bertkit reads)."""
    if name not in FAMILIES:
        raise ConfigError(f"model_type {name!r}: expected one of bert, {', '.join(FAMILIES)}")
    return FAMILIES[name]


# ----------------------------------------------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------------------------------------------


def config_fields(d: dict[str, Any], source: str) -> dict[str, Any]:
    """BertConfig fields from a family's config.json (its model_type says which): its keys under bertkit's names and
    the options the family fixes; a setting bertkit's one model cannot compute is a ConfigError naming it."""
    f = family(d["model_type"])
    fields = {name: d[key] for name, key in f.keys.items() if key in d}
    if f.model_type == "distilbert" and "hidden_size" in d and "dim" not in d:  # transformers' attribute_map
        fields.update({n: d[k] for n, k in (("hidden_size", "hidden_size"), ("num_hidden_layers", "num_hidden_layers"),
                                             ("num_attention_heads", "num_attention_heads")) if k in d})
    fields.update(f.options, family=f.model_type)
    if f.model_type == "albert":
        fields["share_layers"] = _albert_sharing(d, source)
        fields.setdefault("embedding_size", 128)  # transformers' AlbertConfig default
        if fields["embedding_size"] == fields.get("hidden_size", 768):
            raise ConfigError(f"{source}: embedding_size equals hidden_size ({fields['embedding_size']}): ALBERT still "
                              "projects it (embedding_hidden_mapping_in), which bertkit builds only for a narrower "
                              "embedding")
    if f.model_type == "electra":
        if fields.get("embedding_size", 128) == fields.get("hidden_size", 768):
            fields["embedding_size"] = None  # no embeddings_project
        else:
            fields.setdefault("embedding_size", 128)
        odd = {k: d[k] for k, v in _ELECTRA_SUMMARY.items() if k in d and d[k] != v}
        if odd:
            raise ConfigError(f"{source}: {', '.join(f'{k} {v!r}' for k, v in odd.items())}: bertkit reads ELECTRA's "
                              f"multiple-choice summary as {_ELECTRA_SUMMARY} only (dense and GELU on the first "
                              "token)")
    return fields


def _albert_sharing(d: dict[str, Any], source: str) -> bool:
    """ALBERT's layer groups as share_layers: one group (every layer the same) or one group per layer."""
    layers, groups, inner = d.get("num_hidden_layers", 12), d.get("num_hidden_groups", 1), d.get("inner_group_num", 1)
    if inner != 1 or groups not in (1, layers):
        raise ConfigError(f"{source}: num_hidden_groups {groups}, inner_group_num {inner}: bertkit has ALBERT's one "
                          f"shared layer (1 group of 1) or {layers} separate layers ({layers} groups of 1) only")
    return groups == 1 and layers > 1


def hf_config(config: BertConfig, class_name: str) -> dict[str, Any]:
    """config.json in the family's layout (its keys and model_type, `architectures` naming its class) plus
    bertkit's own task fields, which transformers keeps as they are."""
    f = family(config.family)
    d: dict[str, Any] = {"model_type": f.model_type, "architectures": [f.classes[class_name]], **f.written}
    d.update({key: getattr(config, name) for name, key in f.keys.items()})
    d[f.keys["hidden_act"]] = _HF_ACT[config.hidden_act]
    if config.classifier_dropout is None and f.model_type in ("distilbert", "albert"):
        d[f.keys["classifier_dropout"]] = config.hidden_dropout_prob  # bertkit's None; their key takes a number
    if f.model_type == "albert":
        d["num_hidden_groups"] = 1 if config.share_layers else config.num_hidden_layers
    if f.model_type == "electra":
        d["embedding_size"] = config.embedding_width
    d.update(num_labels=config.num_labels, tie_word_embeddings=True)
    d.update({k: getattr(config, k) for k in ("problem_type", "task", "task_settings") if getattr(config, k)})
    if config.label_names is not None:
        d["id2label"] = {str(i): name for i, name in enumerate(config.label_names)}
        d["label2id"] = {name: i for i, name in enumerate(config.label_names)}
    return d


def unexpressed(config: BertConfig, class_name: str) -> list[str]:
    """What keeps a model from its family's layout, in words: options the family's classes do not have, a head
    class it has no class for (empty: the family's folder computes what this model does)."""
    f = FAMILIES.get(config.family)
    if f is None:
        return [f"family {config.family!r} has no layout of its own"]
    found = [f"{name} {getattr(config, name)!r}" for name, value in {**_BERTKIT_ONLY, **f.options}.items()
             if name != "mlm_act" and getattr(config, name) != value]
    mlm = config.mlm_act or config.hidden_act
    if mlm != (f.options["mlm_act"] or config.hidden_act):
        found.append(f"mlm_act {config.mlm_act!r}")
    if f.model_type != "distilbert" and config.type_vocab_size == 0:
        found.append("type_vocab_size 0")
    if f.model_type == "albert" and config.embedding_width == config.hidden_size:
        found.append("no factorised embedding (embedding_size)")
    if class_name not in f.classes:
        found.append(f"the head {class_name}, which transformers has no {f.stem} class for")
    return found


def class_name(model_type: str, architecture: str) -> str | None:
    """bertkit's class for a family's class name in config.json's `architectures` (None: no such class)."""
    classes = FAMILIES[model_type].classes if model_type in FAMILIES else {}
    return next((ours for ours, theirs in classes.items() if theirs == architecture), None)


# ----------------------------------------------------------------------------------------------------------------
# Tensor names
# ----------------------------------------------------------------------------------------------------------------


def bertkit_names(name: str, keys: Iterable[str], source: object) -> dict[str, str]:
    """{file name: bertkit name} for every tensor of a family's weights file; a name outside the family's layout is
    a CheckpointError naming it (it is no tensor of the model config.json describes)."""
    f = family(name)
    names = {key: f.read_name(key) for key in keys}
    unknown = [key for key, mapped in names.items() if mapped is None]
    if unknown:
        raise CheckpointError(f"{source}: {len(unknown)} tensor(s) that are not part of a {f.stem} model's layout: "
                              f"{', '.join(unknown[:8])}{' ...' if len(unknown) > 8 else ''}; is config.json's "
                              f"model_type ({f.model_type!r}) the one these weights were saved with?")
    return names


def family_names(name: str, class_name: str, keys: Iterable[str]) -> dict[str, str]:
    """{bertkit name: the family's name} for the tensors of a `class_name` model that its family's folder holds."""
    f = family(name)
    return {key: mapped for key in keys if (mapped := f.write_name(key, class_name)) is not None}


def is_encoder(bertkit_name: str) -> bool:
    """Whether a bertkit tensor name is the encoder's (embeddings and layers: every family's folder has them)."""
    return bertkit_name.removeprefix(BASE).startswith(_ENCODER_ROOTS)
