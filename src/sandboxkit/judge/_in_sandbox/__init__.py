"""The judge harnesses' program text, one part per file: code that runs inside the sandbox, never here.

Each file is a part of a harness (see :mod:`sandboxkit.judge._harness_source` and
:mod:`sandboxkit.judge._harness_isolated` for how parts are joined into a program); the host reads
the files as text (:func:`~sandboxkit.judge._harness_source.program_text`) and never imports them.
They are stdlib-only Python for the sandbox's own interpreter, which cannot see sandboxkit. Most parts
use names another part defines (``os`` from the imports part, ``_D`` prepended by the host), so the
linter is told to expect undefined names here (``pyproject.toml``) and the type checker skips them.
"""
