"""Stand-in for Sandbox Fusion's ``sandbox`` package (see ../README.md)."""
