"""Write a tiny Llama that vLLM serves with `--load-format dummy`: no weights, no hub.

    <vllm environment>/bin/python vllm_tiny_model.py OUT_DIR

Run by `testservers.vllm` with vLLM's own Python (it needs `tokenizers`, which vLLM brings and
autotune does not). OUT_DIR gets a `LlamaForCausalLM` config (2 layers, hidden 256) and a
byte-level BPE tokenizer trained here on text every machine has (Python's pydoc topics and
the system's licence texts), with a chat template so `/v1/chat/completions` works. Random
weights mean a real scheduler, KV cache and speculative decoding; greedy output loops, so
n-gram drafts are accepted almost always. Deterministic for a given corpus.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL = [BOS, EOS, PAD, "<|system|>", "<|user|>", "<|assistant|>"]
VOCAB = 4096
# {bos}<|role|>\ncontent</s>\n ... <|assistant|>\n
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{ eos_token + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def corpus() -> list[str]:
    texts: list[str] = []
    try:
        from pydoc_data.topics import topics

        texts.extend(topics[k] for k in sorted(topics))
    except ImportError:  # a Python built without its docs
        pass
    licences = Path("/usr/share/common-licenses")
    if licences.is_dir():
        for path in sorted(licences.iterdir()):
            if path.is_file() and not path.is_symlink():
                texts.append(path.read_text(errors="ignore"))
    if not texts:
        raise SystemExit("no text on this machine to train a tokenizer on")
    return texts


def tokenizer():  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)]
    )
    return tok


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    tok.save(str(out / "tokenizer.json"))
    bos, eos, pad = (tok.token_to_id(t) for t in (BOS, EOS, PAD))
    ids = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}
    files = {
        "config.json": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "hidden_act": "silu",
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "vocab_size": tok.get_vocab_size(),
            "torch_dtype": "bfloat16",
            **ids,
        },
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "add_bos_token": True,
            "model_max_length": 2048,
            "chat_template": CHAT_TEMPLATE,
            "added_tokens_decoder": {
                str(tok.token_to_id(t)): {"content": t, "special": True} for t in SPECIAL
            },
        },
        "special_tokens_map.json": {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD},
        "generation_config.json": {**ids, "do_sample": False},
    }
    for name, obj in files.items():
        (out / name).write_text(json.dumps(obj, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: vllm_tiny_model.py OUT_DIR")
    main(Path(sys.argv[1]))
