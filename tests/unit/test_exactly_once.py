"""The exactly-once guard of the cloud backends, run by the real bash of this machine.

Copies of one guarded command, sent one after the other or at the same time, run the command
once; every copy answers with its output and exit code.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from sandboxkit.backends._exactly_once import once_script


def _send(script: str, home: Path) -> tuple[int, str, str]:
    done = subprocess.run(script, shell=True, cwd=home, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout, done.stderr


def test_a_resend_replays_the_result_without_running_again(tmp_path: Path) -> None:
    script = once_script("bash -c 'echo x >> log; echo out; echo err >&2; exit 3'", "c1", root=str(tmp_path), wait_s=5)
    assert [_send(script, tmp_path) for _ in range(3)] == [(3, "out\n", "err\n")] * 3
    assert (tmp_path / "log").read_text() == "x\n"


def test_copies_arriving_together_run_it_once_and_all_answer(tmp_path: Path) -> None:
    script = once_script("bash -c 'sleep 0.3; echo x >> log; exit 5'", "c2", wait_s=5)
    answers: list[tuple[int, str, str]] = []
    threads = [threading.Thread(target=lambda: answers.append(_send(script, tmp_path))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [(5, "", "")] * 4
    assert (tmp_path / "log").read_text() == "x\n"


def test_the_next_command_drops_the_previous_output_but_not_its_marker(tmp_path: Path) -> None:
    first = once_script("echo one", "a1", wait_s=5)
    assert _send(first, tmp_path) == (0, "one\n", "")
    assert _send(once_script("echo two", "a2", wait_s=5, previous="a1"), tmp_path) == (0, "two\n", "")
    assert sorted(p.name for p in (tmp_path / "sandboxkit-ctl" / "a1.once").iterdir()) == ["rc"]
    assert _send(first, tmp_path)[0] == 0  # a late duplicate of the first still does not run it


def test_a_copy_whose_first_never_finishes_gives_up(tmp_path: Path) -> None:
    (tmp_path / "sandboxkit-ctl" / "k1.once").mkdir(parents=True)  # claimed by a copy that was killed
    assert _send(once_script("echo never", "k1", wait_s=0.2), tmp_path) == (124, "", "")


def test_an_id_that_is_not_a_token_is_refused() -> None:
    with pytest.raises(ValueError, match="command id"):
        once_script("true", "../x", wait_s=1)
