"""Byte-level BPE for ``knowgic-tiny``, trained on its own corpus with the ``tokenizers`` library.

GPT-2's scheme (Radford et al. 2019, Sec. 2.2): text is mapped to bytes, pre-split with GPT-2's regex (a
leading space stays on the following word), and BPE merges are learnt on top of the 256-byte alphabet.
Because every byte is in the base alphabet, any string encodes without an unknown token; a small vocabulary
keeps rarer names split into several subword tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from knowgic.models.tiny.corpus import EOS


def train_tokenizer(
    texts: Sequence[str], vocab_size: int, min_frequency: int, add_prefix_space: bool = True
) -> PreTrainedTokenizerFast:
    """A fast GPT-2-style tokenizer whose BOS, EOS, UNK and PAD are all ``<|endoftext|>``.

    Nothing is added around the text when encoding (GPT-2 convention: no BOS), so a prompt's first token is
    at position 0.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    # With a prefix space the decoder drops it again, so decode(encode(text)) == text.
    tok.decoder = (
        decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
        if add_prefix_space
        else decoders.ByteLevel()
    )
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        unk_token=EOS,
        pad_token=EOS,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    return tokenizer


def encodes_cleanly(tokenizer: PreTrainedTokenizerFast, text: str) -> bool:
    """``text`` round-trips through encode/decode and no id is the unknown (= end-of-text) token.

    Byte-level BPE has every byte in its alphabet, so this holds for any text without ``<|endoftext|>``.
    """
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids) == text and tokenizer.unk_token_id not in ids
