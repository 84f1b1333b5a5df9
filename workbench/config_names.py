"""The names a user types: every key of a config model with its doc, the closest known name to a mistyped one,
and the names TRL and verl users know, mapped to this project's (docs/conventions.md).

The bottom of the package (pydantic and the standard library only), so that the registry and the config can both
answer an unknown name with "did you mean".
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

CLOSE = 0.6
"""difflib's similarity at or above which a name in the same section is offered (its default cutoff)."""
CLOSE_ELSEWHERE = 0.8
"""The stricter similarity for a name offered from another section (short names match too easily across them)."""


@dataclass(frozen=True)
class Foreign:
    """A name from another framework: where it lives there, what it is here (None: no equivalent), and a note."""

    framework: str
    name: str
    ours: str | None
    note: str = ""


_REUSE = "each rollout is used that many times, here drawn from a FIFO buffer"

FOREIGN: tuple[Foreign, ...] = (
    # TRL (GRPOConfig and its experimental replay and async trainers)
    Foreign("TRL", "num_generations", "group_size"),
    Foreign("TRL", "num_iterations", "replay.ratio", _REUSE),
    Foreign(
        "TRL",
        "steps_per_generation",
        "objective.minibatches",
        "objective.minibatches = steps_per_generation / gradient_accumulation_steps",
    ),
    Foreign("TRL", "max_completion_length", "generation.max_new_tokens"),
    Foreign("TRL", "max_prompt_length", None, "the task sets the prompts"),
    Foreign("TRL", "epsilon", "objective.eps_low", "and objective.eps_high, which TRL's epsilon also sets"),
    Foreign("TRL", "epsilon_high", "objective.eps_high"),
    Foreign("TRL", "beta", None, "no KL penalty and no reference model, as with TRL's default beta 0"),
    Foreign("TRL", "learning_rate", "lr"),
    Foreign("TRL", "per_device_train_batch_size", "train.micro_batch_size", "batch_size is the whole step's rollouts"),
    Foreign("TRL", "gradient_accumulation_steps", None, "it follows from batch_size / train.micro_batch_size"),
    Foreign("TRL", "max_grad_norm", "grad_clip"),
    Foreign("TRL", "warmup_steps", "lr_warmup_steps"),
    Foreign("TRL", "max_steps", "budget.steps", "or budget.compute_units"),
    Foreign("TRL", "num_train_epochs", None, "set budget.steps or budget.compute_units"),
    Foreign("TRL", "loss_type", "objective.name", "every objective here is a token mean"),
    Foreign("TRL", "scale_rewards", None, "advantages are always scaled by the group's std"),
    Foreign("TRL", "use_vllm", "generation.backend", "generation.backend=vllm"),
    Foreign("TRL", "vllm_gpu_memory_utilization", "generation.vllm.gpu_memory_utilization"),
    Foreign("TRL", "vllm_importance_sampling_correction", "generation.mismatch_correction"),
    Foreign("TRL", "vllm_importance_sampling_cap", "generation.mismatch_cap"),
    Foreign("TRL", "replay_buffer_size", "replay.capacity", "in rollouts here, in groups there"),
    Foreign("TRL", "max_staleness", "replay.horizon"),
    # verl (actor_rollout_ref.*, data.*, algorithm.*, trainer.*: matched on their last parts)
    Foreign("verl", "ppo_epochs", "replay.ratio", _REUSE),
    Foreign(
        "verl",
        "ppo_mini_batch_size",
        "objective.minibatches",
        "objective.minibatches = train_batch_size / ppo_mini_batch_size",
    ),
    Foreign("verl", "ppo_micro_batch_size_per_gpu", "train.micro_batch_size"),
    Foreign("verl", "ppo_micro_batch_size", "train.micro_batch_size"),
    Foreign(
        "verl",
        "train_batch_size",
        "batch_size",
        "batch_size = train_batch_size x rollout.n, rollouts here and prompts there",
    ),
    Foreign("verl", "rollout.n", "group_size"),
    Foreign("verl", "clip_ratio", "objective.eps_low", "and objective.eps_high"),
    Foreign("verl", "clip_ratio_low", "objective.eps_low"),
    Foreign("verl", "clip_ratio_high", "objective.eps_high"),
    Foreign("verl", "clip_ratio_c", "objective.dual_clip"),
    Foreign("verl", "optim.lr", "lr"),
    Foreign("verl", "optim.lr_warmup_steps", "lr_warmup_steps"),
    Foreign("verl", "use_kl_loss", None, "no KL penalty and no reference model"),
    Foreign("verl", "kl_loss_coef", None, "no KL penalty and no reference model"),
    Foreign("verl", "entropy_coeff", None, "no entropy bonus"),
    Foreign("verl", "loss_agg_mode", None, "every objective here is a token mean"),
    Foreign("verl", "adv_estimator", None, "advantages are GRPO's, within each group"),
    Foreign("verl", "response_length", "generation.max_new_tokens"),
    Foreign("verl", "max_response_length", "generation.max_new_tokens"),
    Foreign("verl", "total_training_steps", "budget.steps"),
    Foreign("verl", "enable_gradient_checkpointing", "train.gradient_checkpointing"),
    Foreign("verl", "tensor_model_parallel_size", "generation.vllm.tensor_parallel_size"),
    Foreign("verl", "rollout_is", "generation.mismatch_correction"),
    Foreign("verl", "rollout_is_threshold", "generation.mismatch_cap"),
    Foreign("verl", "staleness_threshold", "replay.horizon", "in optimizer steps here, a fraction there"),
)
"""Other frameworks' names, for the hint of an unknown key (and the table of docs/conventions.md)."""


def foreign_name(key: str) -> Foreign | None:
    """The foreign name `key` ends with (`actor_rollout_ref.actor.ppo_epochs` -> verl's `ppo_epochs`), if any."""
    parts = key.split(".")
    by_name = {f.name: f for f in FOREIGN}
    for i in range(len(parts)):
        if ".".join(parts[i:]) in by_name:
            return by_name[".".join(parts[i:])]
    return None


def closest(word: str, known: Iterable[str], cutoff: float = CLOSE) -> str | None:
    """The known name most like `word` (difflib's ratio >= cutoff), or None."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return match[0] if match else None


def did_you_mean(word: Any, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the known value closest to `word`, or "" when none is close."""
    match = closest(str(word), [str(k) for k in known])
    return f" (did you mean {match!r}?)" if match is not None else ""


def with_sections(keys: Iterable[str]) -> set[str]:
    """Dotted leaf keys and every section above them (`replay.dgg.tau` -> it, `replay.dgg`, `replay`)."""
    return {k.rsplit(".", i)[0] for k in keys for i in range(k.count(".") + 1)}


def closest_key(key: str, keys: Iterable[str]) -> str | None:
    """The known dotted key a mistyped `key` most likely meant: a close name in the same section, else the same or
    a very close last name in another section, else a very close whole key. `keys` are the leaves."""
    known = with_sections(keys)
    parent, _, leaf = key.rpartition(".")
    by_leaf: dict[str, list[str]] = {}
    for k in sorted(known):
        by_leaf.setdefault(k.rpartition(".")[2], []).append(k)

    def likest(name: str) -> str:
        return max(by_leaf[name], key=lambda k: difflib.SequenceMatcher(None, key, k).ratio())

    if leaf in by_leaf:  # the right name in the wrong section (`ratio` for `replay.ratio`)
        return likest(leaf)
    siblings = {k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent}
    if parent == "" or parent in known:
        match = closest(leaf, siblings)
        if match is not None:
            return f"{parent}.{match}" if parent else match
    match = closest(leaf, by_leaf, CLOSE_ELSEWHERE)
    if match is not None:
        return likest(match)
    return closest(key, known, CLOSE_ELSEWHERE)


def unknown_key(key: str, keys: Iterable[str], foreign: bool = False) -> str:
    """The one-line error for an unknown key: `key: unknown key (did you mean x?)`, or with `foreign`, what TRL's
    or verl's name is here."""
    hint = ""
    other = foreign_name(key) if foreign else None
    if other is not None:
        here = f"is {other.ours} here" if other.ours else "has no equivalent here"
        note = f": {other.note}" if other.note else ""
        hint = f" ({other.framework}'s {other.name} {here}{note}; docs/conventions.md)"
    else:
        match = closest_key(key, keys)
        if match is not None:
            hint = f" (did you mean {match}?)"
    return f"{key}: unknown key{hint}"


@dataclass(frozen=True)
class KeyDoc:
    """One key of a config model: its dotted name, declared default, type, allowed values and doc."""

    key: str
    default: Any
    type: str
    doc: str
    choices: tuple = ()
    required: bool = False


PLACEHOLDER = "<name>"
"""The part of a key that names an entry of a mapping (a study's `search_space.<name>.low`)."""


def with_choices(keys: Iterable[KeyDoc], choices: dict[str, Iterable[str]]) -> list[KeyDoc]:
    """`keys`, those named in `choices` (`{key: names}`: a registry's, which the field's type cannot spell) given
    those names as their allowed values the way a `Literal` field has them: as `choices` and as its `type` (`null`
    kept where the field takes it)."""
    out = []
    for k in keys:
        if k.key not in choices:
            out.append(k)
            continue
        names = tuple(sorted(choices[k.key]))
        null = ("null",) if "null" in k.type.split(" | ") else ()
        out.append(dataclasses.replace(k, choices=names, type=" | ".join(names + null)))
    return out


def model_keys(model: type[BaseModel], prefix: str = "") -> list[KeyDoc]:
    """Every leaf key of `model`, nested sections flattened to dotted names. A section may add sections of its
    own (`extra_sections()`: the replay strategies' parameters); a `dict[str, Model]` field becomes `field.<name>.*`.
    Docs are the fields' attribute docstrings (`use_attribute_docstrings`)."""
    out: list[KeyDoc] = []
    nested: list[KeyDoc] = []  # after the section's own keys, so that each section is listed in one piece
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        section = _model_in(field.annotation)
        if section is not None:
            nested += model_keys(section, f"{key}.")
            continue
        entry = _mapping_of_models(field.annotation)
        if entry is not None:
            nested += model_keys(entry, f"{key}.{PLACEHOLDER}.")
            continue
        default = None if field.default is PydanticUndefined else field.default
        if field.default_factory is not None:
            default = field.default_factory()
        out.append(
            KeyDoc(
                key,
                default,
                type_name(field.annotation),
                " ".join((field.description or "").split()),
                _choices(field.annotation),
                field.is_required(),
            )
        )
    extra = getattr(model, "extra_sections", None)
    for name, section in (extra() if extra is not None else {}).items():
        nested += model_keys(section, f"{prefix}{name}.")
    return out + nested


def section_docs(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """`{dotted section: its doc}`: the field's docstring, else the section class's."""
    out: dict[str, str] = {}
    sections = [(n, f.description, _model_in(f.annotation)) for n, f in model.model_fields.items()]
    extra = getattr(model, "extra_sections", None)
    sections += [(n, None, s) for n, s in (extra() if extra is not None else {}).items()]
    for name, doc, section in sections:
        if section is not None:
            text = doc or section.__doc__ or ""
            out[f"{prefix}{name}"] = " ".join(text.split()) if text != BaseModel.__doc__ else ""
            out.update(section_docs(section, f"{prefix}{name}."))
    return out


def _members(annotation: Any) -> tuple:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _mapping_of_models(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is dict:
        return _model_in(typing.get_args(annotation)[1])
    return None


def _choices(annotation: Any) -> tuple:
    return tuple(v for m in _members(annotation) if typing.get_origin(m) is Literal for v in typing.get_args(m))


def type_name(annotation: Any) -> str:
    """`int | null`, `hf | vllm`, `list[int] | int`: a field's type as a user writes its values."""
    names = []
    for member in _members(annotation):
        if member is type(None):
            names.append("null")
        elif typing.get_origin(member) is Literal:
            names += [str(v) for v in typing.get_args(member)]
        elif typing.get_origin(member) is not None:
            names.append(repr(member).replace("typing.", ""))
        else:
            names.append(getattr(member, "__name__", str(member)))
    return " | ".join(names)
