"""`base_model: builtin:tiny-llama`: a 0.5 M-parameter random-init Llama plus its own tokenizer,
made on the fly for demos and tests (no download, seconds on a CPU).

Same inputs, same model everywhere: the tokenizer is a byte-level BPE trained on the corpus shipped
in this package, and every weight is drawn from one seeded generator in parameter-name order (not
left to transformers' init order, which changes between versions). This matters beyond tests: a
LoRA checkpoint stores only the adapter, so a job resumed on another machine must rebuild the very
same frozen base. The result is cached by a key over all inputs and reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

NAME = "builtin:tiny-llama"
SEED = 1234
VOCAB_SIZE = 1024
CONFIG: dict[str, Any] = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
SPECIAL = {"bos": "<|bos|>", "eos": "<|end|>", "pad": "<|pad|>", "unk": "<|unk|>"}
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
# One turn = role marker, newline, content, end marker. The end marker is the eos token, so a model
# trained on it stops after its answer.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
_VERSION = 1  # bump when the recipe above changes in a way the key below would not notice


def corpus_path() -> Path:
    return Path(__file__).with_name("data") / "corpus.txt"


def cache_key() -> str:
    h = hashlib.sha256()
    h.update(corpus_path().read_bytes())
    h.update(json.dumps([_VERSION, SEED, CONFIG, SPECIAL, ROLE_TOKENS, CHAT_TEMPLATE], sort_keys=True).encode())
    return h.hexdigest()[:16]


def build_tokenizer():
    """A byte-level BPE tokenizer trained on the shipped corpus, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [SPECIAL["pad"], SPECIAL["bos"], SPECIAL["eos"], SPECIAL["unk"], *ROLE_TOKENS]
    tok = Tokenizer(models.BPE(unk_token=SPECIAL["unk"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(corpus_path())], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIAL["bos"],
        eos_token=SPECIAL["eos"],
        pad_token=SPECIAL["pad"],
        unk_token=SPECIAL["unk"],
        additional_special_tokens=ROLE_TOKENS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=CONFIG["max_position_embeddings"],
    )


def build_model(tokenizer):
    """The random-init Llama, every weight drawn from one seeded generator in name order."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        **CONFIG,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=False,
    )
    model = LlamaForCausalLM(config)
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * 0.02)
    return model


def cache_root(workdir: Path | None) -> Path:
    """$LAUNCHPAD_HOME/cache/models when set (shared by all jobs), else <workdir>/cache/models."""
    home = os.environ.get("LAUNCHPAD_HOME")
    if home:
        return Path(home) / "cache" / "models"
    if workdir is None:
        raise ValueError("need a workdir when LAUNCHPAD_HOME is not set")
    return Path(workdir) / "cache" / "models"


def ensure_tiny_llama(workdir: Path | None = None) -> Path:
    """The folder of the builtin tiny Llama (model + tokenizer, HF format), built once and cached.

    Built in a temporary folder and renamed into place, so a crash mid-build leaves no half model
    that a later run would load; two jobs building at once both succeed (one rename wins).
    """
    root = cache_root(workdir)
    final = root / f"tiny-llama-{cache_key()}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".lp-tmp-tiny-", dir=root))
    try:
        tokenizer = build_tokenizer()
        model = build_model(tokenizer)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished first: theirs is identical
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
