#!/usr/bin/env python3
"""Re-render the backend option tables in docs/ from the config models (sandboxkit.configs).

Each table sits between ``<!-- options-table: <Config> -->`` and ``<!-- /options-table -->``;
the text between is replaced by :func:`sandboxkit.configs.options_table` of that model.
``tests/unit/test_option_tables.py`` fails while a table differs, naming this script.

Usage: ``PYTHONPATH=src python scripts/option-tables.py`` (rewrites the files in place).
"""

from __future__ import annotations

import pathlib
import re

from sandboxkit import configs

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
#: One table: its opening marker (naming the model), the rendered rows, the closing marker.
TABLE = re.compile(r"(<!-- options-table: (\w+) -->\n)(.*?)(<!-- /options-table -->)", re.DOTALL)


def render(text: str) -> str:
    """``text`` with every table re-rendered from the model its marker names."""
    return TABLE.sub(lambda m: m[1] + configs.options_table(getattr(configs, m[2])) + m[4], text)


def main() -> None:
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            print(f"rendered {path.relative_to(DOCS.parent)}")


if __name__ == "__main__":
    main()
