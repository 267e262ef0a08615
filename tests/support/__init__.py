"""Test support shared by tests/ and e2e/tests/ (chart rendering, finding built tools, Dockerfile parsing).

Not part of any offpeak package: pytest puts tests/ on sys.path (pyproject's pythonpath), so tests import
``support.chart`` and friends.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
