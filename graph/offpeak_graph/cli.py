"""`offpeak extract`: write a model graph (and optionally print its summary). torch is imported only when run."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from offpeak.errors import UserError
from offpeak_graph.options import MODES, OPTIMIZERS, PRECISIONS, parse_shape


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "extract",
        help="extract a model graph (operators, shapes, FLOPs, bytes) from PyTorch or ONNX",
        description="Extract the model graph of one model at one batch size. PyTorch models are traced on the "
        "meta device (no weights in memory).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--entrypoint", metavar="MODULE:FUNC", help="function returning a torch.nn.Module")
    source.add_argument("--torchvision", metavar="NAME", help="torchvision model name, e.g. resnet50")
    source.add_argument(
        "--hf-config", metavar="FILE|NAME",
        help="HuggingFace config.json (random weights, no download) or a built-in name, e.g. gpt2-large",
    )  # fmt: skip
    source.add_argument("--onnx", metavar="FILE", help="ONNX model file")
    parser.add_argument("--batch-size", type=int, required=True, help="samples per step")
    parser.add_argument("--input-shape", metavar="C,H,W", help="per-sample input shape (float input)")
    parser.add_argument("--seq-len", type=int, help="sequence length (token-id input)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--mode", choices=MODES, default="train")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    parser.add_argument("--python-path", metavar="DIR", action="append", default=[],
                        help="extra directory for importing the entry point (repeatable, or DIR1:DIR2)")  # fmt: skip
    parser.add_argument("--out", metavar="FILE", help="graph file to write (.json or .json.gz)")
    parser.add_argument("--summary", action="store_true", help="print a one-object JSON summary on stdout")
    parser.set_defaults(func=run_extract)


def run_extract(args: argparse.Namespace) -> int:
    from offpeak_graph.extract import extract_graph
    from offpeak_graph.schema import save_graph

    if not args.out and not args.summary:
        raise UserError("nothing to do: pass --out FILE and/or --summary")
    graph = extract_graph(
        entrypoint=args.entrypoint,
        torchvision=args.torchvision,
        hf_config=args.hf_config,
        onnx=args.onnx,
        batch_size=args.batch_size,
        input_shape=parse_shape(args.input_shape),
        seq_len=args.seq_len,
        precision=args.precision,
        mode=args.mode,
        optimizer=args.optimizer,
        python_path=[d for entry in args.python_path for d in entry.split(os.pathsep) if d],
    )
    if args.out:
        try:
            save_graph(graph, args.out)
        except OSError as e:
            raise UserError(f"cannot write {args.out}: {e.strerror or e}") from e
    if args.summary:
        summary = graph.summary()
        summary["content_hash"] = graph.content_hash()
        json.dump(summary, sys.stdout)
        sys.stdout.write("\n")
    return 0
