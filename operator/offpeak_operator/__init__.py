"""offpeak_operator."""
