"""``str_replace_editor`` of an rLLM episode: the model's edit commands on the sandbox's files.

The text operations are pure (:mod:`._editor`); this module maps the model's path, reads and
writes through the backend's file API (never ``echo`` in a shell, so bytes round-trip exactly)
and lists directories. Every mistake of the model is an ``Error: ...`` answer it can act on.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sandboxkit.integrations._editor import EditError
from sandboxkit.integrations._editor import insert as edit_insert
from sandboxkit.integrations._editor import str_replace as edit_str_replace
from sandboxkit.integrations._editor import view as edit_view
from sandboxkit.integrations._format import truncate_middle
from sandboxkit.integrations._workspace import WorkspaceMap
from sandboxkit.models import ExecResult

__all__ = ["EpisodeFiles", "edit"]


@dataclass(frozen=True)
class EpisodeFiles:
    """The episode sandbox's files and shell, as the editor and the grader need them.

    Attributes:
        workspace: the working directory's mapping (model paths ↔ workspace paths).
        read: a workspace-relative path's bytes, or None if it does not exist.
        write: write text to a workspace-relative path.
        exec: run a shell command in the working directory.
    """

    workspace: WorkspaceMap
    read: Callable[[str], bytes | None]
    write: Callable[[str, str], None]
    exec: Callable[[str], ExecResult]


def edit(files: EpisodeFiles, args: Mapping[str, Any], max_chars: int) -> str:
    """Answer one ``str_replace_editor`` call (view / create / str_replace / insert)."""
    workspace = files.workspace
    command = args.get("command")
    if command == "view" and workspace.is_root(args.get("path")):
        return _view_dir(files, ".", workspace.workdir, max_chars)
    try:
        rel = workspace.relative(args.get("path", ""))
    except ValueError as exc:
        return f"Error: {exc}"
    shown = workspace.display(rel)
    if command == "create":
        text = args.get("file_text")
        if not isinstance(text, str):
            return "Error: create needs 'file_text' (a string)."
        files.write(rel, text)
        return f"File created successfully at: {shown}"
    if command not in ("view", "str_replace", "insert"):
        return f"Error: unknown command {command!r}; use view, create, str_replace or insert."
    content = files.read(rel)
    if content is None:
        if command == "view":
            return _view_dir(files, rel, shown, max_chars)
        return f"Error: the path {shown} does not exist."
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return f"Error: {shown} is not a UTF-8 text file."
    try:
        if command == "view":
            return truncate_middle(edit_view(text, shown, args.get("view_range")), max_chars)
        if command == "str_replace":
            updated, message = edit_str_replace(text, shown, args.get("old_str"), args.get("new_str"))
        else:
            updated, message = edit_insert(text, shown, args.get("insert_line"), args.get("new_str"))
    except EditError as exc:
        return f"Error: {exc}"
    files.write(rel, updated)
    return truncate_middle(message, max_chars)


def _view_dir(files: EpisodeFiles, rel: str, shown: str, max_chars: int) -> str:
    quoted = "'" + rel.replace("'", "'\\''") + "'"
    result = files.exec(f"test -d {quoted} && find {quoted} -maxdepth 2 -not -path '*/.*' | sort")
    if not result.ok:
        return f"Error: the path {shown} does not exist."
    listing = "\n".join(
        files.workspace.display(posixpath.normpath(line)) for line in result.stdout.splitlines() if line
    )
    return truncate_middle(f"Here are the files and directories up to 2 levels deep in {shown}:\n{listing}", max_chars)
