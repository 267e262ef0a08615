"""offpeak_predictor."""
