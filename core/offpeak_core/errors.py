"""Errors shared by every component (re-exported as `offpeak.errors`)."""


class UserError(Exception):
    """Bad user input: the CLI prints it as one line (exit status 2, no traceback); services map it to 4xx."""
