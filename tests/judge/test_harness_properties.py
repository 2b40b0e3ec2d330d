"""Property tests: the harness report parser reads back exactly what the harness wrote.

The parser sits between untrusted output and a reward: it must recover every report line
whatever else shares the stream, and never raise on anything a program can print.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandboxkit.judge.harness import MARK, HarnessReport, parse_harness_output

#: The harness reports finite numbers only (times, sizes), so no inf/nan: a report line is a Python literal.
json_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30)
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=6,
)
case_item = st.fixed_dictionaries(
    {"i": st.integers(0, 50), "status": st.sampled_from(["ok", "error", "timeout", "memory_exceeded"])},
    optional={"value": json_value, "error": st.text(max_size=40), "t": st.floats(0, 100)},
)
#: Lines a program or the interpreter might leave on the harness's stdout: anything without the mark.
#: (Characters ``str.splitlines`` breaks on are left out: they would make two lines of one.)
noise_line = st.text(max_size=60).filter(lambda s: MARK.strip() not in s and s.splitlines() in ([], [s]))


def _line(obj: Any) -> str:
    """A report line exactly as the harness's ``_report`` writes it (``repr``, read with ``ast.literal_eval``)."""
    return MARK + repr(obj) + "\n"


@st.composite
def streams(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]], bool]:
    items = draw(st.lists(case_item, max_size=8))
    done = draw(st.booleans())
    lines = [_line(item) for item in items]
    for _ in range(draw(st.integers(0, 6))):
        lines.insert(draw(st.integers(0, len(lines))), draw(noise_line) + "\n")
    if done:
        lines.append(_line({"done": True}))
    return "".join(lines), items, done


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_every_report_line_is_recovered_among_noise(stream: tuple[str, list[dict[str, Any]], bool]) -> None:
    text, items, done = stream
    report = parse_harness_output(text)
    expected = {item["i"]: item for item in items}  # a case reported twice: the last report wins
    assert report.results == expected
    assert report.finished is done
    assert report.syntax_error is None


@given(st.text(max_size=80), st.lists(noise_line, max_size=3))
def test_a_syntax_error_report_is_final(message: str, noise: list[str]) -> None:
    report = parse_harness_output("".join(n + "\n" for n in noise) + _line({"syntax_error": message}))
    assert report == HarnessReport(syntax_error=message, finished=True)


@given(st.text(max_size=400))
def test_arbitrary_output_never_raises_and_never_invents_a_finished_run(text: str) -> None:
    report = parse_harness_output(text)
    if MARK not in text:
        assert report == HarnessReport()


@given(st.lists(case_item, min_size=1, max_size=4), noise_line.filter(bool))
def test_a_mark_not_at_line_start_is_not_a_report(items: list[dict[str, Any]], prefix: str) -> None:
    # A solution printing the mark mid-line (or a line cut by a crash) must not be read as a result.
    text = "".join(prefix + _line(item) for item in items)
    assert parse_harness_output(text).results == {}
