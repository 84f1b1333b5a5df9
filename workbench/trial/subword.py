"""A Llama with a subword (byte-level BPE) tokenizer, built locally: what `workbench build-model` writes.

No model hub is needed to try the `model.path` route with a real subword vocabulary: the tokenizer is trained with
`tokenizers` on a task's own text (a JSONL file's questions and answers), the model is a freshly initialised
`LlamaForCausalLM` of that vocabulary at any size (a ~100M-parameter one for a first GPU run: docs/gpu.md), and
both are saved like any HF directory (safetensors weights, `tokenizer.json`), so a trial loads them with
`from_pretrained` exactly as it loads a downloaded model. The tokenizer may carry a chat template (a minimal
ChatML-style one) and may leave out the pad token: the policy then pads with EOS, the usual fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from workbench.config import ConfigError
from workbench.trial.tasks import jsonl_lines

BOS, EOS, PAD = "<s>", "</s>", "<pad>"

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""One turn per message (`<|role|>`, the content, EOS), the assistant's turn opened last; it writes its own BOS."""


@dataclass(frozen=True)
class LlamaSize:
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256


SIZES = {
    "tiny": LlamaSize(),
    "100m": LlamaSize(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=2048),
}
"""Named sizes: `tiny` for tests and a CPU try-out (0.17M parameters at a 570-token vocabulary), `100m` for a first
GPU run (85M parameters plus 0.77M per 1k tokens of vocabulary: ~110M at 32k; embeddings tied)."""


def jsonl_texts(path: str | Path) -> list[str]:
    """Every question and answer of a JSONL task file (the tokenizer's training text); an error names the line."""
    texts = []
    for _, _, obj in jsonl_lines(path, "--jsonl"):
        texts += (
            [v for v in (obj.get("question"), obj.get("answer")) if isinstance(v, str)] if isinstance(obj, dict) else []
        )
    if not texts:
        raise ConfigError(f"{Path(path).expanduser()}: no question or answer text to train a tokenizer on")
    return texts


def train_bpe_tokenizer(
    texts: list[str], vocab_size: int, *, chat_template: bool = True, pad_token: bool = False
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts` that frames text as `<s> text`; with `chat_template`, it
    carries `CHAT_TEMPLATE`; without `pad_token`, it has none (as many base models ship)."""
    special = [BOS, EOS] + ([PAD] if pad_token else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD if pad_token else None
    )
    if chat_template:
        out.chat_template = CHAT_TEMPLATE
    return out


def build_llama(tokenizer: PreTrainedTokenizerFast, size: LlamaSize, seed: int = 0) -> LlamaForCausalLM:
    """A freshly initialised Llama of the tokenizer's vocabulary (tied embeddings, as small Llamas ship)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_heads,
        intermediate_size=size.intermediate_size,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def build_model_dir(
    out: str | Path,
    jsonl: str | Path,
    *,
    size: str = "tiny",
    vocab_size: int = 1000,
    chat_template: bool = True,
    pad_token: bool = False,
    seed: int = 0,
) -> dict:
    """Train the tokenizer on `jsonl`, build the model, save both to `out` (safetensors); a summary of what was built."""
    if size not in SIZES:
        raise ConfigError(f"--size: one of {', '.join(SIZES)}, got {size!r}")
    if vocab_size < 300:
        raise ConfigError(
            f"--vocab-size: at least 300 (256 bytes, the special tokens and some merges), got {vocab_size}"
        )
    tokenizer = train_bpe_tokenizer(jsonl_texts(jsonl), vocab_size, chat_template=chat_template, pad_token=pad_token)
    model = build_llama(tokenizer, SIZES[size], seed)
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {
        "path": str(out),
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "size": size,
        "chat_template": chat_template,
        "pad_token": pad_token,
    }
