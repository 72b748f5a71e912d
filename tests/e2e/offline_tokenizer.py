"""A Hugging Face tokenizer made on the spot, for `vllm bench serve` without Hub access.

A word-level vocabulary of the stand-in engine's output words (plus a few for prompts), split on
whitespace, saved as a ``PreTrainedTokenizerFast`` folder that ``--tokenizer <dir>`` loads. The
random dataset draws prompt tokens from this vocabulary; the bench counts output tokens with it,
and every word the stand-in answers with is in it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIAL = ("[UNK]", "[EOS]")
PROMPT_WORDS = tuple(f"w{index}" for index in range(200))


def write_tokenizer(folder: Path) -> Path:
    from standin_engine import WORDS  # imports Ray: only once the local Ray's environment is set

    vocabulary = {token: index for index, token in enumerate((*SPECIAL, *WORDS, *PROMPT_WORDS))}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "[UNK]",
                "eos_token": "[EOS]",
                "model_max_length": 32768,
            },
            indent=2,
        )
    )
    return folder
