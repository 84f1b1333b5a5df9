"""Model sources, registered by name (`model.source`, `workbench.registry.MODEL_SOURCES`): where a trial's starting
model comes from.

Registered: `directory` (a HF causal-LM directory at `model.path`) and `embedded` (the warm-started tiny Llama), one
module each. A new source is one module: a `ModelSource` subclass (`base`) registered with
`@register_model_source("name")`; `model.source: name` then picks it. An unset `model.source` is `directory` when
`model.path` is set, else `embedded`.
"""

from workbench.registry import MODEL_SOURCES
from workbench.trial.model_sources.base import (
    ModelSource,
    load_policy,
    model_source,
    register_model_source,
    starting_checkpoint,
)
from workbench.trial.model_sources.directory import Directory
from workbench.trial.model_sources.embedded import Embedded

__all__ = [
    "MODEL_SOURCES",
    "Directory",
    "Embedded",
    "ModelSource",
    "load_policy",
    "model_source",
    "register_model_source",
    "starting_checkpoint",
]
