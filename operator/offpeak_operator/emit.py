"""Last step of the analysis pod: reduce the extracted graph to fit a ConfigMap and print it to the log.

Run as `python -m offpeak_operator.emit /graph/graph.json.gz` in the offpeak image; the operator reads the block
back with `graphstore.from_log`. No Kubernetes credentials are needed in the user's namespace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from offpeak_operator.graphstore import DEFAULT_LIMIT_BYTES, GraphDecodeError, GraphTooLarge, decode_bytes, encode_graph
from offpeak_operator.graphstore import to_log_lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offpeak_operator.emit", description=__doc__)
    parser.add_argument("graph", type=Path, help="model graph written by `offpeak extract` (.json or .json.gz)")
    parser.add_argument("--limit-bytes", type=int, default=DEFAULT_LIMIT_BYTES)
    args = parser.parse_args(argv)
    try:
        graph = decode_bytes(args.graph.read_bytes())
        encoded = encode_graph(graph, limit_bytes=args.limit_bytes)
    except (OSError, GraphDecodeError, GraphTooLarge) as e:
        print(f"offpeak emit: error: {e}", file=sys.stderr)
        return 1
    print(f"graph {graph.model_name}: {encoded.original_ops} ops, stored {encoded.ops} "
          f"({encoded.reduced or 'whole'}), {len(encoded.data)} bytes gzip", file=sys.stderr)
    header = {"hash": encoded.graph_hash, "reduced": encoded.reduced, "original_ops": encoded.original_ops}
    sys.stdout.write("\n".join(to_log_lines(encoded.data, header)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
