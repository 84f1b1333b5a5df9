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


def test_the_registered_vllm_backend_starts_an_engine_sized_for_the_longest_prompt(monkeypatch):
    import torch

    from workbench.backends import vllm
    from workbench.config import build_config
    from workbench.registry import GENERATION_BACKENDS

    monkeypatch.setattr(vllm, "VllmSampler", lambda *args: args)  # what the engine would be started with
    model = torch.nn.Linear(2, 2)
    policy = SimpleNamespace(
        path="/models/m",
        max_new_tokens=10,
        device=torch.device("cpu"),
        model=model,
        encode=lambda ps: [[0] * len(p) for p in ps],
    )
    task = SimpleNamespace(train=[SimpleNamespace(prompt="ab")] * 3, eval=[SimpleNamespace(prompt="abcdef")])
    cfg = build_config({"generation": {"backend": "vllm"}})
    assert GENERATION_BACKENDS[cfg.generation.backend] is vllm.VllmBackend and vllm.VllmBackend.package == "vllm"
    assert vllm.VllmBackend.start(cfg, policy, task) == (
        "/models/m",
        cfg,
        6 + 10 + 16,
        torch.float32,
        policy.device,
        model,
    )
