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


def installed(package: str) -> bool:
    """Whether `package` can be imported here as a real package (looked up, not imported: importing vLLM takes
    seconds). A folder of that name on the path without an `__init__.py` (a namespace package, such as a test folder
    named `vllm`, or a clone's top folder) is not the package."""
    spec = importlib.util.find_spec(package)
    return spec is not None and spec.origin not in (None, "namespace")


def check_installed(backend: str) -> None:
    """Raise `not_installed` when `backend` needs a package that cannot be found here."""
    if backend in INSTALL and not installed(backend):
        raise not_installed(backend)
