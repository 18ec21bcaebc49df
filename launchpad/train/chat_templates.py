"""Chat templates by name (Axolotl's `chat_template: chatml`, `llama3`, ...), set on the tokenizer.

A recipe's `chat_template` is one of NAMED, "tokenizer_default" (the tokenizer's own, the default), or a
Jinja template itself. Each named one renders the prompt as a prefix of the whole conversation (TRL's
completion-only loss relies on that), and the end-of-turn marker after every assistant message, so the
model learns to stop. No imports: the recipe validator reads NAMED.
"""

from __future__ import annotations

_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen2.5's: ChatML with Qwen's default system message when the conversation has none
_QWEN_25 = (
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}" + _CHATML
)

_LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

_PHI_3 = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

# Gemma has no system role: a system message is put in front of the first user turn (as Gemma 3's does)
_GEMMA = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] | trim + '\\n\\n' %}"
    "{% else %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + ns.system + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% set ns.system = '' %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

#: name -> Jinja template
NAMED: dict[str, str] = {"chatml": _CHATML, "qwen_25": _QWEN_25, "llama3": _LLAMA3, "phi_3": _PHI_3, "gemma": _GEMMA}

#: Axolotl's names for the template a model family ships with: the tokenizer's own is that one
MODEL_FAMILY = {
    "llama4": ("llama-4",), "gemma3": ("gemma-3",), "gemma3n": ("gemma-3n",), "gemma4": ("gemma-4",),
    "gemma4_unified": ("gemma-4",), "qwen3": ("qwen3",), "qwen3_5": ("qwen3.5", "qwen3_5"), "falcon_h1": ("falcon-h1",),
    "cohere": ("command", "aya", "c4ai"), "deepseek_v2": ("deepseek-v2",), "jamba": ("jamba",), "mistral_v7_tekken":
    ("mistral",), "phi_4": ("phi-4",), "llama3_2_vision": ("llama-3.2",), "qwen2_vl": ("qwen2-vl",), "pixtral": ("pixtral",),
}


def is_jinja(value: str) -> bool:
    return "{{" in value or "{%" in value


def resolve(value: str | None) -> str | None:
    """The Jinja template for a recipe's `chat_template`, or None for the tokenizer's own."""
    if not value or value == "tokenizer_default":
        return None
    return NAMED.get(value, value)
