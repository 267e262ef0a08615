"""The model graph: a framework-neutral, versioned description of a DL model's operators.

`schema` is pure Python (no torch); the extractors in `offpeak_graph.extract_*` import torch/onnx lazily.
"""

from offpeak_graph.schema import SCHEMA_VERSION, ModelGraph, Op, OpType, load_graph, save_graph

__all__ = ["SCHEMA_VERSION", "ModelGraph", "Op", "OpType", "load_graph", "save_graph"]
