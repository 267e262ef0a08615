"""offpeak_dashboard."""
