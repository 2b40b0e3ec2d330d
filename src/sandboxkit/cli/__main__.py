"""``python -m sandboxkit.cli``."""

from sandboxkit.cli import main

main()
