"""What autograd really keeps for backward vs what the memory estimate says it keeps, on models the H100
measurements never saw (CPU, fp32, small batches; no GPU needed).

For each model, one training forward pass runs on the CPU under `torch.autograd.graph.saved_tensors_hooks`, which
sees every tensor autograd saves; the distinct storages that are not parameters are summed (`measured`). The same
module's graph (`offpeak_graph.extract.extract_module`) goes through the estimate's forward replay, and the bytes it
keeps for backward are summed (`predicted`). This checks the per-op rules (`memory_rules.py`) and the plan
(aliases, fused attention) on architectures outside the H100 data; it does not check the allocator, the loss or the
backward timeline (the H100 rows do: bench/memory_eval.py).

CPU differences, kept out of the comparison: dropout is disabled (on the CPU it keeps an fp32 mask, on a GPU a bool
one); the CPU's fused attention keeps what the GPU's flash/efficient kernels keep (q, k, v, output, logsumexp).

Writes `reports/predictor/memory/saved_audit.json`. Run: `.venv/bin/python bench/memory_saved_audit.py` (~1-2 min).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from offpeak_graph.extract import extract_module
from offpeak_predictor.memory import _Step
from offpeak_predictor.memory_plan import build_plan

REPO = Path(__file__).resolve().parents[1]
# torchvision name -> batch; none of these is in runtime/offpeak-h100
VISION = {"resnet50": 4, "densenet121": 4, "mobilenet_v3_large": 8, "efficientnet_v2_s": 4, "convnext_tiny": 4,
          "regnet_y_800mf": 4, "vgg11_bn": 2, "inception_v3": 2, "swin_t": 2, "maxvit_t": 2,
          "vit_b_16": 2, "shufflenet_v2_x0_5": 8, "wide_resnet50_2": 2}  # fmt: skip
# HF model type -> config (small widths, dropout off), batch, sequence; none of these is in the H100 data
TEXT: dict[str, tuple[dict[str, Any], int, int]] = {
    "bert": ({"architectures": ["BertForMaskedLM"], "hidden_size": 256, "num_hidden_layers": 4,
              "num_attention_heads": 4, "intermediate_size": 1024}, 4, 128),
    "gpt_neox": ({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 256, "num_hidden_layers": 4,
                  "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 8000}, 2, 256),
    "llama": ({"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 8000},
              2, 256),
    "t5": ({"architectures": ["T5EncoderModel"], "d_model": 256, "num_layers": 3, "num_heads": 4,
            "d_ff": 1024, "d_kv": 64, "vocab_size": 8000}, 2, 128),
    "opt": ({"architectures": ["OPTForCausalLM"], "hidden_size": 256, "num_hidden_layers": 4,
             "num_attention_heads": 4, "ffn_dim": 1024, "word_embed_proj_dim": 256, "vocab_size": 8000}, 2, 256),
    "phi": ({"architectures": ["PhiForCausalLM"], "hidden_size": 256, "num_hidden_layers": 4,
             "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 8000}, 2, 256),
}  # fmt: skip
DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout",
                "activation_dropout", "dropout_rate", "resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout",
                "classifier_dropout", "layerdrop")  # fmt: skip


def no_dropout(module: nn.Module) -> nn.Module:
    for m in module.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return module


def saved_bytes(module: nn.Module, call: Callable[[], Any]) -> int:
    """Distinct non-parameter storages autograd saves during one forward pass (bytes)."""
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    storages: dict[int, int] = {}
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            storages[ptr] = t.untyped_storage().nbytes()
            keep.append(t)  # keeps the storage alive so a later tensor cannot reuse its address
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        call()
    return sum(storages.values())


def predicted_saved(graph: Any) -> int:
    step = _Step(build_plan(graph, amp=False, scale=1.0))
    step.forward(train=True)
    return sum(step.ledger.live[key][0] for key in step.savers if key in step.ledger.live)


def audit_vision(name: str, batch: int) -> dict[str, Any]:
    import torchvision

    kwargs: dict[str, Any] = {"weights": None}
    if name == "inception_v3":
        kwargs.update(init_weights=False, aux_logits=False)
    module = no_dropout(torchvision.models.get_model(name, **kwargs)).train()
    size = 299 if name == "inception_v3" else 224
    x = torch.randn(batch, 3, size, size)
    graph = extract_module(module, batch_size=batch, input_shape=(3, size, size), model_name=name)
    return {"model": name, "batch": batch, "measured": saved_bytes(module, lambda: module(x)),
            "predicted": predicted_saved(graph)}  # fmt: skip


def audit_text(model_type: str, config: dict[str, Any], batch: int, seq: int) -> dict[str, Any]:
    import transformers

    transformers.logging.set_verbosity_error()
    data = dict(config)
    arch = data.pop("architectures")[0]
    data.update({k: 0.0 for k in DROPOUT_KEYS})
    cfg = transformers.AutoConfig.for_model(model_type, **data)
    cfg.use_cache = False
    module = no_dropout(getattr(transformers, arch)(cfg)).train()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    kwargs = {"input_ids": ids, "decoder_input_ids": ids} if cfg.is_encoder_decoder else {"input_ids": ids}
    graph = extract_module(module, batch_size=batch, seq_len=seq, model_name=model_type)
    return {"model": f"{model_type} ({arch})", "batch": batch, "seq": seq,
            "measured": saved_bytes(module, lambda: module(**kwargs)), "predicted": predicted_saved(graph)}  # fmt: skip


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    results = []
    jobs: list[Callable[[], dict[str, Any]]] = [lambda n=n, b=b: audit_vision(n, b) for n, b in VISION.items()]
    jobs += [lambda t=t, c=c: audit_text(t, *c) for t, c in TEXT.items()]
    for job in jobs:
        try:
            r = job()
        except Exception as e:  # noqa: BLE001 - one model failing must not hide the others
            print(f"skipped: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            continue
        r["error_pct"] = round(100 * (r["predicted"] / r["measured"] - 1), 2)
        results.append(r)
        print(f"{r['model']:38s} measured {r['measured'] / 2**20:9.1f} MiB  predicted {r['predicted'] / 2**20:9.1f} MiB"
              f"  {r['error_pct']:+6.1f}%", flush=True)  # fmt: skip
    mean = round(statistics.fmean(abs(r["error_pct"]) for r in results), 2)
    print(f"mean |error| of the bytes kept for backward: {mean} % over {len(results)} models")
    out = REPO / "reports" / "predictor" / "memory" / "saved_audit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"mean_abs_error_pct": mean, "device": "cpu", "precision": "fp32",
                               "torch": torch.__version__, "models": results}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
