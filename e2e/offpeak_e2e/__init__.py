"""offpeak_e2e."""
