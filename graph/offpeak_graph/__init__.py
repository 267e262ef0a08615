"""The model graph: a framework-neutral, versioned description of a DL model's operators.

`schema` is pure Python (no torch). `offpeak_graph.extract.extract_graph` is the extractor's entry point; it
imports torch/onnx only when called (modules `torch_trace`, `torch_models`, `onnx_extract`).
"""

from offpeak_graph.schema import SCHEMA_VERSION, ModelGraph, Op, OpType, load_graph, save_graph

__all__ = ["SCHEMA_VERSION", "ModelGraph", "Op", "OpType", "load_graph", "save_graph"]
