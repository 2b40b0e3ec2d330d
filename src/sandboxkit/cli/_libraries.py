"""``doctor --strict``'s library checks: the libraries Sandbox Fusion's image bundles, each imported in a sandbox.

A correct program that imports one of them passes under Sandbox Fusion; where the library is missing it fails
here, and the answer scores 0 with nothing to say the set-up was at fault. So the strict check proves each
library the way it proves a toolchain: a small program (``hello/libraries/<language>-<name>.<ext>``) that uses
it runs through a pool on the backend and must print ``hello`` (or pass, for a test framework).

What a set-up promises: on the host, every library of a promised language (``bootstrap.sh --all`` installs
them); in the Docker image, those whose entry its ``sandboxkit.packages`` label lists (a Debian package, or
``go:<module>=<version>`` for the Go module cache that ``docker-setup.sh`` copies in).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

__all__ = ["LIBRARIES", "Library", "carried_by_image"]


@dataclass(frozen=True)
class Library:
    """One bundled library and the program that proves it.

    Attributes:
        name: what the doctor's table shows (``Data::Compare``).
        language: the language whose programs import it.
        program: the proving program's file name under ``hello/libraries``.
        provides: the image label's entry when the image carries it: a Debian package, or a ``go:<module>``
            prefix (the label lists ``go:<module>=<version>``).
    """

    name: str
    language: str
    program: str
    provides: str

    @property
    def row(self) -> str:
        """The row name in the doctor's table: ``perl: Data::Compare``."""
        return f"{self.language}: {self.name}"

    def code(self) -> str:
        """The proving program's text (shipped with the package)."""
        return (resources.files("sandboxkit.cli") / "hello" / "libraries" / self.program).read_text()


#: Sandbox Fusion's runtime image: Perl's Data::Compare, javatuples on Java's classpath, Go's testify as a
#: module (its runtime/go), matplotlib in the sandbox Python (scripts/toolchains.sh installs each).
LIBRARIES = (
    Library("Data::Compare", "perl", "perl-data-compare.pl", "libdata-compare-perl"),
    Library("javatuples", "java", "java-javatuples.java", "libjavatuples-java"),
    Library("testify", "go_test", "go_test-testify.go", "go:github.com/stretchr/testify"),
    Library("matplotlib", "python", "python-matplotlib.py", "python3-matplotlib"),
)


def carried_by_image(library: Library, label: str) -> bool:
    """Whether an image whose ``sandboxkit.packages`` label is ``label`` carries ``library``."""
    return any(item == library.provides or item.startswith(library.provides + "=") for item in label.split(","))
