"""offpeak_extender."""
