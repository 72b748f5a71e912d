"""Build the scaled-down model on disk: random weights, a tokenizer trained here, a chat template.

Runs where torch, transformers and tokenizers are installed (the gpu-check venv: they come with
vLLM). Nothing is downloaded: the tokenizer learns its merges from text generated below, and the
weights are transformers' own random initialisation of the configured architecture class.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.gpu_check.scale_down import ScaleDownError, scale_down

VOCAB_SIZE = 4096
SEED = 20261201
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ChatML, the format of Qwen's and many other chat templates: enough for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_prompt(text: str) -> str:
    """What CHAT_TEMPLATE renders for one user message with the generation prompt: the
    completion a chat request must equal."""
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


# The vocabulary of the training text (and of stage 1's prompts: words the tokenizer knows).
WORDS = [
    "prefill",
    "decode",
    "cache",
    "block",
    "tensor",
    "engine",
    "request",
    "token",
    "stream",
    "answer",
    "latency",
    "memory",
    "network",
    "fabric",
    "device",
    "rail",
    "node",
    "cluster",
    "replica",
    "model",
    "layer",
    "expert",
    "router",
    "batch",
    "queue",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "on",
    "for",
    "with",
    "that",
    "by",
    "from",
    "at",
    "as",
    "be",
    "this",
    "are",
    "or",
    "an",
    "it",
]


def training_text(lines: int = 4000) -> list[str]:
    """Deterministic word salad with digits and punctuation, so every byte class gets merges."""
    rng = random.Random(SEED)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
        + f" {rng.randint(0, 99999)}{rng.choice('.,;:!?')}"
        for _ in range(lines)
    ]


def _tokenizer(special_tokens: Sequence[str]) -> Any:
    """A byte-level BPE tokenizer of VOCAB_SIZE entries (the special tokens among them), trained
    on training_text(), with the ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(training_text(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def parser_tokens(parsers: Mapping[str, str], tokenizer: Any) -> list[str]:
    """The token strings the deployed tool-call and reasoning parsers look up in the vocabulary
    and this tokenizer lacks. vLLM builds the parser at every chat request, and some refuse a
    vocabulary without their tokens (vLLM 0.26 DeepSeekV3ToolParser: 'could not locate tool call
    start/end tokens'). Read from the parser class itself: it is constructed on this tokenizer,
    and the ``*_token`` strings it set before it refused are the ones it needs."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    lookup = {
        "tool_call_parser": ToolParserManager.get_tool_parser,
        "reasoning_parser": ReasoningParserManager.get_reasoning_parser,
    }
    vocabulary = tokenizer.get_vocab()
    needed: set[str] = set()
    for option, name in parsers.items():
        parser_class = lookup[option](name)
        parser = parser_class.__new__(parser_class)
        with contextlib.suppress(Exception):  # a refusal is what this reads past
            parser.__init__(tokenizer)
        needed.update(
            value
            for attribute, value in vars(parser).items()
            if attribute.endswith("_token") and isinstance(value, str) and value
        )
    return sorted(needed - set(vocabulary))


def build(config: Mapping[str, Any], out: Path, parsers: Mapping[str, str]) -> list[str]:
    """Write config.json, random safetensors weights and the tokenizer files into ``out``; return
    the scale-down's change lines. ``parsers``: the deployed ``tool_call_parser`` and
    ``reasoning_parser`` options, whose tokens the vocabulary must hold."""
    import torch
    from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM

    small, notes = scale_down(config, vocab_size=VOCAB_SIZE)
    if small.get("model_type") not in CONFIG_MAPPING:
        raise ScaleDownError(
            f"model_type {small.get('model_type')!r} needs the model's own code "
            "(trust_remote_code), which gpu-check does not download"
        )
    out.mkdir(parents=True, exist_ok=True)

    fast = _tokenizer(SPECIAL_TOKENS)
    extra = parser_tokens(parsers, fast)
    if extra:
        fast = _tokenizer(SPECIAL_TOKENS + extra)
        notes.append(f"tokenizer: special tokens of {dict(parsers)}: {', '.join(extra)}")
    fast.save_pretrained(out)

    ids = {token: fast.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    small.update(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(SEED)
    hf_config = AutoConfig.for_model(**small)
    model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained writes transformers' view of the config; keep the architecture's own keys
    # (vLLM reads some that transformers drops, e.g. DeepSeek's routing fields).
    saved = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**saved, **small}, indent=2, sort_keys=True))
    return notes
