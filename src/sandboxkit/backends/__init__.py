"""Built-in backends. Each module imports its SDK lazily; see ``_plugins`` for registration."""
