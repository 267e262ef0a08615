"""offpeak_agent."""
