"""One reader per public trace, used by the simulator, the window evaluation and the e2e load driver alike."""
