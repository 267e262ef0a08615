"""The single `offpeak` command: each component registers its own subcommands.

Components are imported lazily and must not import heavy libraries (torch) at module import time, so
`offpeak --help` and the services start fast on images without the [extract] extra.

Every command runs through `main`, which turns an expected failure (`offpeak.errors.failure`) into one line on
stderr and its documented exit code (docs/cli.md); `--debug` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from offpeak import __version__
from offpeak.cliargs import Parser
from offpeak.errors import ExitCode, failure

# Modules that expose `register(subparsers) -> None`. Each added parser sets `func=callable(args) -> int`.
COMPONENT_CLI_MODULES: tuple[str, ...] = (
    "offpeak_graph.cli",  # extract
    "offpeak_predictor.cli",  # predict, predictor serve, train-predictor, eval-predictor, collect
    "offpeak_operator.cli",  # operator, jobs, explain
    "offpeak_extender.cli",  # extender, evictor
    "offpeak_agent.cli",  # agent
    "offpeak_sim.cli",  # simulate
    "offpeak_e2e.cli",  # cluster, demo
    "offpeak_dashboard.cli",  # dashboard, plot-runtimes
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="offpeak",
        description="Run offline DL training in idle GPU windows left by online inference. Exit codes: 0 done, "
                    "1 the answer is no, 2 bad input, 3 no usable Kubernetes configuration, 4 a service did not "
                    "answer (docs/cli.md).",
    )  # fmt: skip
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
    stops a command at its start with the reason, before a service runs on half of it. Commands that never read
    GPU types (`jobs`, `explain`, `cluster down|status|build`) opt out with `set_defaults(gpu_catalogue=False)`."""
    from offpeak_core.gpuproducts import site_products

    site_products()
    try:
        from offpeak_predictor.gpus import known_gpus
    except ImportError:
        return
    known_gpus()


def _report(prog: str, exc: BaseException, *, debug: bool) -> int:
    """One line for an expected failure (with its traceback under --debug); re-raise a bug."""
    found = failure(exc)
    if found is None:
        raise exc
    code, line = found
    if debug:
        traceback.print_exception(exc)
    print(f"{prog}: error: {line}", file=sys.stderr)
    return int(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    prog = "offpeak"
    try:
        args = parser.parse_args(argv)  # may raise UserError: a bad OFFPEAK_* value of this command
        prog = getattr(args, "_prog", prog)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help()
            return ExitCode.USAGE
        if getattr(args, "gpu_catalogue", True):
            check_site_catalogue()
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # the reader left (`| head`): say nothing more, and keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 - `failure` sorts expected failures from bugs, which are re-raised
        return _report(prog, e, debug="--debug" in argv)


if __name__ == "__main__":
    sys.exit(main())
