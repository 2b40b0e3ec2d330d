"""A third-party backend for tests: its 'programs' print their own source text."""
