"""Built-in HuggingFace configs, so common models extract offline by name (`--hf-config gpt2-large`).

Values follow the public hub configs (`gpt2*`, `bert-*-uncased`, `facebook/opt-*`) and the NeuSight benchmark configs
(`gpt3_*`, `switchxl4`), whose model names the runtime benchmark rows use. Only the keys that change the graph are
given; transformers fills in its defaults for the rest. Lookup ignores case and treats `_` like `-`.
"""

from __future__ import annotations

import copy
from typing import Any


def _gpt2(n_embd: int, n_layer: int, n_head: int, n_positions: int = 1024) -> dict[str, Any]:
    return {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
        "n_embd": n_embd, "n_layer": n_layer, "n_head": n_head, "n_positions": n_positions, "n_ctx": n_positions,
        "vocab_size": 50257, "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256,
    }  # fmt: skip


def _bert(hidden: int, layers: int, heads: int, intermediate: int, arch: str = "BertForMaskedLM") -> dict[str, Any]:
    return {
        "model_type": "bert", "architectures": [arch], "hidden_act": "gelu", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": heads, "intermediate_size": intermediate,
        "max_position_embeddings": 512, "type_vocab_size": 2, "vocab_size": 30522, "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
    }  # fmt: skip


def _opt(hidden: int, layers: int, heads: int, ffn: int, proj: int, *, ln_before: bool = True) -> dict[str, Any]:
    return {
        "model_type": "opt", "architectures": ["OPTForCausalLM"], "activation_function": "relu",
        "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads, "ffn_dim": ffn,
        "word_embed_proj_dim": proj, "do_layer_norm_before": ln_before, "max_position_embeddings": 2048,
        "vocab_size": 50272, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
    }  # fmt: skip


PRESETS: dict[str, dict[str, Any]] = {
    "gpt2": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
    "gpt2-large": _gpt2(1280, 36, 20),
    "gpt2-xl": _gpt2(1600, 48, 25),
    "bert-base-uncased": _bert(768, 12, 12, 3072),
    "bert-large-uncased": _bert(1024, 24, 16, 4096),
    # NVIDIA DeepLearningExamples BERT fine-tuning on SQuAD (Lambda benchmark columns bert_*_squad): QA head.
    "bert-base-squad": _bert(768, 12, 12, 3072, "BertForQuestionAnswering"),
    "bert-large-squad": _bert(1024, 24, 16, 4096, "BertForQuestionAnswering"),
    "opt-125m": _opt(768, 12, 12, 3072, 768),
    "opt-350m": _opt(1024, 24, 16, 4096, 512, ln_before=False),
    "opt-1.3b": _opt(2048, 24, 32, 8192, 2048),
    # NeuSight benchmark models (model_configs/*.json of sitar-lab/NeuSight).
    "gpt3-xl": _gpt2(3072, 24, 24, 2048),
    "gpt3-27": _gpt2(2560, 32, 32, 2048),
    "gpt3-67": _gpt2(4096, 32, 32, 2048),
    "gpt3-13": _gpt2(5120, 40, 40, 2048),
    "bert": _bert(768, 12, 12, 3072, "BertLMHeadModel"),
    "bert-large": _bert(1024, 24, 16, 4096, "BertLMHeadModel"),
    "switchxl4": {
        "model_type": "switch_transformers", "architectures": ["SwitchTransformersForConditionalGeneration"],
        "d_model": 1024, "d_ff": 16384, "d_kv": 128, "num_heads": 32, "num_layers": 24, "num_decoder_layers": 24,
        "num_experts": 4, "num_sparse_encoder_layers": 12, "num_sparse_decoder_layers": 12,
        "encoder_sparse_step": 2, "decoder_sparse_step": 2, "expert_capacity": 64, "vocab_size": 32128,
        "feed_forward_proj": "relu", "is_encoder_decoder": True, "router_jitter_noise": 0.01,
    },
}  # fmt: skip

ALIASES: dict[str, str] = {
    "gpt2-med": "gpt2-medium",
    "gpt2-small": "gpt2",
    "bert-base": "bert",
    "bert-large-cased": "bert-large-uncased",
    "bert-base-cased": "bert-base-uncased",
    "opt-13": "opt-1.3b",
    "opt-1-3b": "opt-1.3b",
    "facebook/opt-1.3b": "opt-1.3b",
    "facebook/opt-125m": "opt-125m",
    "facebook/opt-350m": "opt-350m",
    "gpt3-2.7b": "gpt3-27",
    "gpt3-6.7b": "gpt3-67",
    "gpt3-13b": "gpt3-13",
    "openai-community/gpt2": "gpt2",
    "openai-community/gpt2-medium": "gpt2-medium",
    "openai-community/gpt2-large": "gpt2-large",
    "openai-community/gpt2-xl": "gpt2-xl",
    "google-bert/bert-base-uncased": "bert-base-uncased",
    "google-bert/bert-large-uncased": "bert-large-uncased",
}


def normalise_name(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def preset(name: str) -> dict[str, Any] | None:
    """A fresh copy of the built-in config called `name` (or an alias of it), else None."""
    key = normalise_name(name)
    key = ALIASES.get(key, key)
    found = PRESETS.get(key)
    return copy.deepcopy(found) if found is not None else None


def preset_names() -> list[str]:
    return sorted(PRESETS)
