"""Stand-in for ``sandbox.server``."""
