"""Property tests: every model survives JSON both ways, whatever text, bytes and limits it holds.

Models cross process and machine boundaries (the Ray actor, ``sandboxkit serve``, results.jsonl),
so a value that does not come back equal is a reward computed on different data than was run.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sandboxkit.languages import LANGUAGES
from sandboxkit.models import ExecResult, Limits, RunRequest, RunResult, Status, decode_output

#: Any text a model might print or write, odd unicode included (NUL, RTL marks, astral emoji,
#: line separators); lone surrogates are excluded because they are not valid in JSON text at all.
any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=200)
path_part = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="/\\\x00"), min_size=1, max_size=12)
rel_path = st.lists(path_part, min_size=1, max_size=3).map("/".join).filter(lambda p: ".." not in p.split("/"))
safe_path = rel_path.filter(lambda p: all(part not in ("", ".") for part in p.split("/")))
finite = {"allow_nan": False, "allow_infinity": False}

limits_st = st.builds(
    Limits,
    timeout_s=st.floats(min_value=1e-3, max_value=24 * 3600, **finite),
    compile_timeout_s=st.floats(min_value=1e-3, max_value=3600, **finite),
    memory_mb=st.none() | st.integers(1, 1 << 40),
    cpus=st.none() | st.floats(min_value=1e-3, max_value=512, **finite),
    pids=st.none() | st.integers(1, 1 << 31),
    output_bytes=st.integers(1, 1 << 40),
    output_head_fraction=st.floats(0, 1, **finite),
    output_stop_bytes=st.none() | st.integers(1, 1 << 40),
    file_size_mb=st.none() | st.integers(1, 1 << 20),
    network=st.booleans(),
)

request_st = st.builds(
    RunRequest,
    code=any_text,
    language=st.sampled_from(sorted(LANGUAGES)),
    stdin=st.none() | any_text,
    files=st.dictionaries(safe_path, st.binary(max_size=64), max_size=4),
    fetch_files=st.lists(safe_path, max_size=3),
    limits=limits_st,
    env=st.dictionaries(any_text, any_text, max_size=3),
    argv=st.lists(any_text, max_size=3),
)

exec_st = st.builds(
    ExecResult,
    status=st.sampled_from([s for s in Status if s is not Status.COMPILE_ERROR]),
    exit_code=st.none() | st.integers(-(1 << 31), 1 << 31),
    signal=st.none() | st.integers(1, 64),
    stdout=any_text,
    stderr=any_text,
    stdout_truncated=st.booleans(),
    stderr_truncated=st.booleans(),
    duration_s=st.floats(min_value=0, max_value=1e6, **finite),
)


@st.composite
def results(draw: st.DrawFn) -> RunResult:
    base: dict[str, Any] = draw(exec_st).model_dump()
    base["status"] = draw(st.sampled_from(list(Status)))
    compile_step = draw(exec_st) if base["status"] is Status.COMPILE_ERROR else draw(st.none() | exec_st)
    return RunResult(
        **base,
        compile=compile_step,
        files=draw(st.dictionaries(safe_path, st.binary(max_size=64), max_size=4)),
        language=draw(st.sampled_from(sorted(LANGUAGES))),
        backend=draw(any_text),
        sandbox_id=draw(st.none() | any_text),
    )


@settings(deadline=None)
@given(limits_st)
def test_limits_round_trip_json(limits: Limits) -> None:
    assert Limits.model_validate_json(limits.model_dump_json()) == limits
    assert Limits.model_validate(limits.model_dump()) == limits


@settings(deadline=None)
@given(request_st)
def test_run_request_round_trips_json(request: RunRequest) -> None:
    wire = request.model_dump_json()
    again = RunRequest.model_validate_json(wire)
    assert again == request
    assert again.files == request.files  # bytes exact, through base64
    assert RunRequest.model_validate(request.model_dump()) == request


@settings(deadline=None)
@given(st.dictionaries(safe_path, any_text, max_size=4))
def test_text_file_bodies_are_their_utf8_bytes(files: dict[str, str]) -> None:
    request = RunRequest(code="", files=dict(files))
    assert sorted(request.files.values()) == sorted(body.encode("utf-8") for body in files.values())


@settings(deadline=None)
@given(results())
def test_run_result_round_trips_json(result: RunResult) -> None:
    assert RunResult.model_validate_json(result.model_dump_json()) == result


@given(st.binary(max_size=300))
def test_decode_output_never_raises_and_replaces_only_invalid_bytes(data: bytes) -> None:
    text = decode_output(data)
    assert text == data.decode("utf-8", errors="replace")
    text.encode("utf-8")  # always valid text: a result can always be serialised
    if "\ufffd" not in text:
        assert text.encode("utf-8") == data  # nothing was replaced: the bytes come back exactly


@given(any_text)
def test_decode_output_is_identity_on_valid_utf8(text: str) -> None:
    assert decode_output(text.encode("utf-8")) == text
