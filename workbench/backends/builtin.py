"""The built-in generation backends, registered when `GENERATION_BACKENDS` is first read: `hf`
(`workbench.backends.hf.HfBackend`) and `vllm` (`workbench.backends.vllm.VllmBackend`, whose package is imported
only when its engine starts)."""

from workbench.backends.hf import HfBackend
from workbench.backends.vllm import VllmBackend

__all__ = ["HfBackend", "VllmBackend"]
