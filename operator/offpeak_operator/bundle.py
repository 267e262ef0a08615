"""Build the pure-Python zipapp that the analysis pod copies into the user's image.

`python -m offpeak_operator.bundle --out /opt/offpeak/offpeak.pyz` (run when building the offpeak image). The
bundle holds only pure-Python packages (offpeak, offpeak_graph, and the core they stand on without its data
sample); the user's image supplies torch.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import zipapp
from collections.abc import Sequence
from pathlib import Path

PACKAGES: tuple[str, ...] = ("offpeak", "offpeak_graph", "offpeak_core")
MAIN = "import sys\nfrom offpeak.cli import main\nsys.exit(main())\n"


def build_bundle(out: Path, *, packages: Sequence[str] = PACKAGES) -> Path:
    """Write the zipapp to `out` (its `__main__` is the `offpeak` CLI) and return the path."""
    with tempfile.TemporaryDirectory(prefix="offpeak-bundle-") as tmp:
        root = Path(tmp)
        for name in packages:
            module = importlib.import_module(name)
            src = Path(module.__file__ or "").parent
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tests", "sample_data"))
        (root / "__main__.py").write_text(MAIN)
        out.parent.mkdir(parents=True, exist_ok=True)
        zipapp.create_archive(root, out, interpreter="/usr/bin/env python3", compressed=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offpeak_operator.bundle", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    path = build_bundle(args.out)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
