"""A tokenizer of the family's vocabulary size, made here, for a GPU machine without the Hub.

The real-size model's speed depends on the tokenizer only through the vocabulary size (the
embedding and LM head rows, real_size.py); the load generator needs a tokenizer whose decode
and re-encode round trip holds, because `vllm bench serve`'s random and prefix datasets draw
token ids, decode them to text and re-encode that text to the requested length
(vllm/benchmarks/datasets/datasets.py ``gen_prompt_decode_to_target_len``, v0.26.0).

So the tokenizer is one whole word per token: a WordLevel model over ``words`` words, split on
whitespace with the Metaspace pre-tokenizer and decoder (``▁`` marks the word's space), plus the
family's added special tokens after the words, as Qwen3's tokenizer numbers them (151,643
byte-level BPE tokens, then 26 added ones from ``<|endoftext|>``: Qwen3-8B's tokenizer_config.
json). Every id decodes, and text it decoded encodes back to the same ids. The prefix router
hashes prompt text (serve_extensions/prefix_index.py), so equal token prefixes are equal text
prefixes, as with the real tokenizer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# Qwen3's vocabulary: byte-level BPE tokens, then added tokens (tokenizer_config.json's
# added_tokens_decoder, ids 151643-151668).
QWEN3_WORDS = 151_643
QWEN3_ADDED = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    *(f"<|added_{index}|>" for index in range(3, 26)),
)
END_OF_TEXT = "<|im_end|>"


def word(index: int) -> str:
    return f"w{index:x}"


def build(out: Path, words: int = QWEN3_WORDS, added: tuple[str, ...] = QWEN3_ADDED) -> int:
    """Write tokenizer.json and tokenizer_config.json into ``out``; return the vocabulary size
    (words + added tokens)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {f"▁{word(index)}": index for index in range(words)}
    # Text that is not a word of it (none that it decoded) encodes as the first word.
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=f"▁{word(0)}"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in added])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": END_OF_TEXT,
        "pad_token": added[0],
        "model_max_length": 40960,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return words + len(added)


def given_or_built(given: str | None, state: Path) -> tuple[Path, list[str]]:
    """The tokenizer folder a run uses: the one given, else this one built under ``state``,
    with the line the run's record prints for it."""
    if given:
        return Path(given), []
    size = build(state / "tokenizer")
    return state / "tokenizer", [
        f"tokenizer: a word-level one of Qwen3's {size} tokens (tools/gpu_bench/"
        "word_tokenizer.py; no Hub on the GPU machine): same embedding and LM head rows"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    size = build(parser.parse_args().out)
    print(f"word tokenizer: {size} tokens")


if __name__ == "__main__":
    main()
