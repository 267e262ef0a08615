"""offpeak_sim."""
