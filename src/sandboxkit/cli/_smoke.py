"""``sandboxkit doctor --strict``: run every promised toolchain once, inside the sandbox, and say which fail.

Finding a toolchain's binaries proves little: a ``node`` wrapper without its execute bit, a JVM that cannot
start under the sandbox's limits, or a package of the npm tree that is gone all pass a presence check and fail
every run. So the strict check runs a small program per language (``hello/<language>.<ext>``, shipped with the
package) through a pool on the backend, exactly as a user's program runs, and reports each failure by name.
The libraries Sandbox Fusion's image bundles are proved the same way (``_libraries``).

What a set-up promises: on the host, every language that is not ``unavailable`` (``bootstrap.sh --all``
installs them all); in the Docker image, the languages whose Debian packages the image's
``sandboxkit.packages`` label lists (``docker-setup.sh`` writes what it installed there).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sandboxkit.cli._libraries import LIBRARIES, Library, carried_by_image
from sandboxkit.errors import SandboxkitError
from sandboxkit.languages import LANGUAGES, NODE_PREFIX, Language
from sandboxkit.models import Limits, RunResult, Status

__all__ = [
    "check_languages",
    "check_libraries",
    "docker_image_label",
    "docker_promised",
    "hello_program",
    "host_promised",
    "strict_check",
]

#: Test-framework languages: their program is a passing test suite, judged by the framework's exit code.
FRAMEWORKS = frozenset({"pytest", "go_test", "junit", "jest"})
#: Generous: a JVM or rustc on two busy cores takes seconds, and the check must not call a slow machine broken.
LIMITS = Limits(timeout_s=120.0, compile_timeout_s=300.0, memory_mb=2048, pids=256)


def hello_program(name: str) -> str:
    """The program that proves ``name``'s toolchain: prints ``hello``, or is a passing test suite."""
    folder = resources.files("sandboxkit.cli") / "hello"
    matches = [entry for entry in folder.iterdir() if entry.name.split(".", 1)[0] == name]
    if len(matches) != 1:
        raise LookupError(f"no hello program for language {name!r} in sandboxkit/cli/hello")
    return matches[0].read_text()


def host_promised() -> list[str]:
    """Languages ``bootstrap.sh --all`` installs on the host: every one that is not marked unavailable."""
    return [name for name, lang in LANGUAGES.items() if not lang.unavailable]


def docker_promised(label: str) -> list[str]:
    """Languages an image built by ``docker-setup.sh`` carries, from its ``sandboxkit.packages`` label.

    The label lists Debian packages and, as ``npm:<spec>``, the npm tree's packages; a language is promised
    when all its packages are listed (and, for one that runs from the npm tree, when the tree is).
    """
    listed = set(label.split(","))
    has_npm_tree = any(item.startswith("npm:") for item in listed)

    def carried(lang: Language) -> bool:
        from_npm = any(path.startswith(NODE_PREFIX) for path in (*lang.binaries, *lang.files))
        return set(lang.package.split()) <= listed and (has_npm_tree or not from_npm)

    return [name for name in host_promised() if carried(LANGUAGES[name])]


def verdict(name: str, outcome: RunResult | SandboxkitError) -> str:
    """What is wrong with ``name``'s run, or ``""`` when its toolchain works."""
    if isinstance(outcome, SandboxkitError):
        return f"{type(outcome).__name__}: {outcome}"
    if outcome.status is Status.COMPILE_ERROR and outcome.compile is not None:
        return f"compile_error: {_tail(outcome.compile.stderr or outcome.compile.stdout)}"
    if outcome.status is not Status.OK:
        return f"{outcome.status.value} (exit {outcome.exit_code}): {_tail(outcome.stderr or outcome.stdout)}"
    if name not in FRAMEWORKS and "hello" not in outcome.stdout:
        return f"ran but printed {_tail(outcome.stdout)!r} instead of 'hello'"
    return ""


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]


def check_languages(
    backend: str, names: Iterable[str], options: Mapping[str, object] | None = None, concurrency: int = 2
) -> dict[str, str]:
    """Run each language's hello program on ``backend``; language → problem (``""`` when it works).

    Raises:
        SandboxError: the backend itself cannot be used (every language would fail the same way).
    """
    wanted = list(names)
    outcomes = _run_programs(backend, [(name, hello_program(name)) for name in wanted], options, concurrency)
    return {name: verdict(name, outcome) for name, outcome in zip(wanted, outcomes, strict=True)}


def check_libraries(
    backend: str, libraries: Iterable[Library], options: Mapping[str, object] | None = None, concurrency: int = 2
) -> dict[str, str]:
    """Run each library's proving program on ``backend``; the library's row name → problem (``""`` when it works).

    Raises:
        SandboxError: the backend itself cannot be used.
    """
    wanted = list(libraries)
    outcomes = _run_programs(backend, [(lib.language, lib.code()) for lib in wanted], options, concurrency)
    return {lib.row: verdict(lib.language, outcome) for lib, outcome in zip(wanted, outcomes, strict=True)}


def _run_programs(
    backend: str, programs: Sequence[tuple[str, str]], options: Mapping[str, object] | None, concurrency: int
) -> list[RunResult | SandboxkitError]:
    from sandboxkit.pool import SandboxPool

    requests = [{"code": code, "language": language, "limits": LIMITS} for language, code in programs]

    async def go() -> list[RunResult | SandboxkitError]:
        async with SandboxPool(backend, max_concurrency=concurrency, backend_options=dict(options or {})) as pool:
            return await pool.run_many(requests)

    return asyncio.run(go())


def _missing_protections(options: dict[str, object]) -> list[str]:
    """The subprocess sandbox's missing isolation mechanisms: bootstrap installs bubblewrap and sets up the
    rest, so one that is missing (a chroot where bwrap cannot pivot_root, say) is a failed set-up. With a
    ``rootfs`` the shared image uid is listed by design, so that configuration is checked for languages only."""
    from sandboxkit.registry import backend

    if options.get("rootfs"):
        return []
    try:
        gaps = backend("subprocess", **options).capabilities.missing_protections
    except SandboxkitError as exc:
        return [f"subprocess backend unusable: {exc}"]
    return [f"subprocess sandbox: missing protection: {gap}" for gap in gaps]


def docker_image_label(image: str | None = None) -> str:
    """The ``sandboxkit.packages`` label of the Docker backend's image (``""`` on an image built elsewhere)."""
    import docker

    from sandboxkit.backends.docker import DEFAULT_IMAGE, IMAGE_ENV

    name = image or os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE
    client = docker.from_env(timeout=30)
    try:
        labels = client.images.get(name).labels or {}
    finally:
        client.close()
    return str(labels.get("sandboxkit.packages", ""))


def strict_check(
    console: Console,
    docker: bool,
    only: Sequence[str],
    subprocess_options: Mapping[str, object] | None = None,
    *,
    libraries: bool = True,
) -> list[str]:
    """Run every promised toolchain (or those of ``only``) on each local backend; print a table; the problems.

    ``subprocess_options`` configure the subprocess sandboxes checked (a ``path``, a ``rootfs``...).
    ``libraries=False`` leaves the bundled libraries out (a set-up that did not promise them: the plain
    ``bootstrap.sh`` installs the light toolchains, not the libraries ``--all`` adds).

    A backend that cannot be used at all is one problem, named with its reason; so is every isolation
    mechanism the subprocess sandbox lacks, and every language whose hello program does not run. An empty
    list means everything the set-up promised works.
    """
    from sandboxkit.registry import available_backends

    problems = _missing_protections(dict(subprocess_options or {}))
    promised = {"subprocess": host_promised()}
    # The libraries of the promised languages: on the host all of them, in the image those its label lists.
    bundled = {"subprocess": list(LIBRARIES) if libraries else []}
    if docker:
        spec = available_backends().get("docker")
        avail = spec.availability() if spec is not None else None
        if avail is not None and avail.usable:
            label = docker_image_label()
            promised["docker"] = docker_promised(label)
            bundled["docker"] = [lib for lib in LIBRARIES if libraries and carried_by_image(lib, label)]
        else:
            problems.append(f"docker backend unusable: {avail.reason if avail else 'not installed'}")
    results: dict[str, dict[str, str]] = {}
    for backend, names in promised.items():
        wanted = [n for n in names if not only or n in only]
        try:
            options = subprocess_options if backend == "subprocess" else None
            results[backend] = check_languages(backend, wanted, options) if wanted else {}
            # A library of a language that did not run is not checked: that language's row names the problem.
            ran = {name for name, problem in results[backend].items() if not problem}
            libs = [lib for lib in bundled[backend] if lib.language in ran]
            results[backend].update(check_libraries(backend, libs, options) if libs else {})
        except SandboxkitError as exc:
            problems.append(f"{backend} backend unusable: {exc}")
            results[backend] = {}
    table = Table(title="toolchains and bundled libraries run once inside the sandboxes (doctor --strict)")
    for col in ("language", *(f"{b} sandbox" for b in results), "install"):
        table.add_column(col)
    names = list(only or host_promised())
    rows = [(name, name, LANGUAGES[name].install_hint) for name in names]
    rows += [(lib.row, lib.language, _LIBRARY_HINT) for lib in LIBRARIES if libraries and lib.language in names]
    for name, language, hint in rows:
        cells = []
        for backend, found in results.items():
            if name not in found:
                cells.append("[dim]not run[/]" if found.get(language) else "[dim]not promised[/]")
            elif found[name]:
                cells.append("[red]FAILED[/]")
                problems.append(f"{name} on {backend}: {found[name]}")
            else:
                cells.append("[green]ran[/]")
        failed = any(found.get(name) for found in results.values())
        table.add_row(escape(name), *cells, escape(hint) if failed else "")
    console.print(table)
    return problems


_LIBRARY_HINT = "bash scripts/bootstrap.sh --all (the lists in scripts/toolchains.sh), then rebuild the Docker image"
