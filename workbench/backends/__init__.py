"""Generation backends: `hf` (transformers on the trainer's device) and `vllm` (a colocated vLLM engine).

`hf` also scores completions with gradients, which is what every objective trains. `vllm` is an optional
dependency, imported only when `generation.backend: vllm` asks for it.
"""
