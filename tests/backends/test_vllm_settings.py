"""The vLLM backend's settings that need no engine (the engine's own tests run in `make test-vllm`)."""

from types import SimpleNamespace

from workbench.backends.vllm import stop_ids


def test_every_eos_of_the_generation_config_ends_a_completion():
    # Qwen2.5-Instruct's generation config lists <|im_end|> and <|endoftext|>; a completion ending in either finished
    assert stop_ids(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[151645, 151643]))) == {
        151645,
        151643,
    }
    assert stop_ids(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=2))) == {2}
    assert stop_ids(SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None))) == set()
    assert stop_ids(None) == set()
