"""Generation backends, registered by name (`generation.backend`, `workbench.registry.GENERATION_BACKENDS`): `hf`
(transformers on the trainer's device) and `vllm` (a colocated vLLM engine), each one `GenerationBackend` class
(`workbench.backends.base`).

`hf` also scores completions with gradients, which is what every objective trains. `vllm` is an optional
dependency, imported only when its engine starts; `check_installed` tells whether this environment has a backend's
package without importing it (a study checks it before its first trial).
"""

import importlib.util

from workbench.config import ConfigError
from workbench.registry import GENERATION_BACKENDS


def not_installed(backend: str) -> ConfigError:
    """The error of a `generation.backend` whose package this environment lacks, with how to install it."""
    how = GENERATION_BACKENDS[backend].install
    return ConfigError(f"generation.backend: {backend} is not installed in this environment ({how})")


def installed(package: str) -> bool:
    """Whether `package` can be imported here as a real package (looked up, not imported: importing vLLM takes
    seconds). A folder of that name on the path without an `__init__.py` (a namespace package, such as a test folder
    named `vllm`, or a clone's top folder) is not the package."""
    spec = importlib.util.find_spec(package)
    return spec is not None and spec.origin not in (None, "namespace")


def check_installed(backend: str) -> None:
    """Raise `not_installed` when `backend` needs a package that cannot be found here."""
    package = GENERATION_BACKENDS.lookup(backend).package
    if package is not None and not installed(package):
        raise not_installed(backend)
