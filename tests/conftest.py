"""Suite-wide: say which data the data-reading tests run on (the full public data, or the shipped sample)."""

from offpeak_core import datapaths


def pytest_report_header() -> str:
    return datapaths.describe()
