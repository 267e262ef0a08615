"""The single `offpeak` command: each component registers its own subcommands.

Components are imported lazily and must not import heavy libraries (torch) at module import time, so
`offpeak --help` and the services start fast on images without the [extract] extra.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from offpeak import __version__
from offpeak.errors import UserError

# Modules that expose `register(subparsers) -> None`. Each added parser sets `func=callable(args) -> int`.
COMPONENT_CLI_MODULES: tuple[str, ...] = (
    "offpeak_graph.cli",  # extract
    "offpeak_predictor.cli",  # predict, predictor serve, train-predictor, eval-predictor, collect
    "offpeak_operator.cli",  # operator
    "offpeak_extender.cli",  # extender, evictor
    "offpeak_agent.cli",  # agent
    "offpeak_sim.cli",  # simulate
    "offpeak_e2e.cli",  # cluster, demo
    "offpeak_dashboard.cli",  # dashboard, plot-runtimes
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offpeak",
        description="Run offline DL training in idle GPU windows left by online inference.",
    )
    parser.add_argument("--version", action="version", version=f"offpeak {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMPONENT_CLI_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                continue  # component not installed in this build
            raise
        module.register(subparsers)
    return parser


def check_site_catalogue() -> None:
    """A site GPU catalogue (`$OFFPEAK_GPU_CATALOGUE`) that does not parse, or that clashes with the built-in GPUs,
    stops every command at its start with the reason, before a service runs on half of it."""
    from offpeak_core.gpuproducts import site_products

    site_products()
    try:
        from offpeak_predictor.gpus import known_gpus
    except ImportError:
        return
    known_gpus()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        check_site_catalogue()
        return int(func(args) or 0)
    except UserError as e:
        print(f"offpeak {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
