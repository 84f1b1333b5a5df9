"""Generation backends: `hf` (transformers on the trainer's device) and `vllm` (a colocated vLLM engine).

`hf` also scores completions with gradients, which is what every objective trains. `vllm` is an optional
dependency, imported only when `generation.backend: vllm` asks for it; `check_installed` tells whether this
environment has it without importing it (a study checks it before its first trial).
"""

import importlib.util

from workbench.config import ConfigError

INSTALL = {"vllm": "GPU: pip install '.[vllm]'; CPU: make vllm-env, then run .venv-vllm/bin/workbench"}
"""How to install each backend that needs an optional package (named as the backend)."""


def not_installed(backend: str) -> ConfigError:
    """The error of a `generation.backend` whose package this environment lacks, with how to install it."""
    return ConfigError(f"generation.backend: {backend} is not installed in this environment ({INSTALL[backend]})")


def check_installed(backend: str) -> None:
    """Raise `not_installed` when `backend` needs a package that cannot be found here (looked up, not imported:
    importing vLLM takes seconds)."""
    if backend in INSTALL and importlib.util.find_spec(backend) is None:
        raise not_installed(backend)
