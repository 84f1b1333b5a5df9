"""Compiled (AOTInductor) and eager static decoding against the transformers loop on the default model: greedy tokens
and log-probs on the 500 held-out prompts, sampled ones on a 16 x 8 training batch (issue 12, acceptance 3).

    .venv/bin/python benchmarks/decode_agreement.py
"""

import torch
from workbench.config import TrialConfig
from workbench.trial.tasks import load_task
from workbench.trial.policy import Policy
from workbench.backends.decode import StaticDecoder
from workbench.backends.hf import encode_prompts, sample

cfg = TrialConfig()
task = load_task(cfg.task)
pol = Policy(cfg, task)
torch.set_num_threads(2)
ev = encode_prompts(pol.tokenizer, [e.prompt for e in task.eval])
tr = [p for p in encode_prompts(pol.tokenizer, [e.prompt for e in task.train[:16]]) for _ in range(8)]
comp = StaticDecoder(pol.model, compiled=True)
eager = StaticDecoder(pol.model, compiled=False)
for name, prompts, greedy in (("eval greedy 500", ev, True), ("train sampled 128", tr, False)):
    kw = dict(max_new_tokens=pol.max_new_tokens, greedy=greedy, temperature=1.0)
    outs = {
        k: f(pol.tokenizer, prompts, generator=torch.Generator().manual_seed(11), **kw)
        for k, f in (
            ("hf", lambda *a, **k: sample(pol.model, *a, **k)),
            ("eager", eager.sample),
            ("compiled", comp.sample),
        )
    }
    for k in ("eager", "compiled"):
        same = outs[k].completion_ids == outs["hf"].completion_ids
        diff = max(
            float((a - b).abs().max()) for a, b in zip(outs[k].logprobs, outs["hf"].logprobs) if len(a) == len(b)
        )
        print(f"{name}: {k} vs hf: tokens identical {same}, max |logprob diff| {diff:.2e}")
    print(
        f"{name}: compiled vs eager tokens identical {outs['compiled'].completion_ids == outs['eager'].completion_ids},",
        f"max |diff| {max(float((a - b).abs().max()) for a, b in zip(outs['compiled'].logprobs, outs['eager'].logprobs)):.2e}",
    )
print("compiled stayed compiled:", comp.compiled)
