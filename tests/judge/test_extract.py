"""Code extraction: every path, and the method it reports."""

from __future__ import annotations

import pytest

from sandboxkit.errors import InvalidRequest
from sandboxkit.judge import completion_text, extract_code


def test_last_block_of_the_wanted_language_wins() -> None:
    text = "First try:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    got = extract_code(text, "python")
    assert (got.code, got.method) == ("print(2)\n", "fenced")


@pytest.mark.parametrize("tag", ["py", "python3", "Python", "{python}"])
def test_language_aliases_in_the_info_string(tag: str) -> None:
    assert extract_code(f"```{tag}\nx = 1\n```", "python").method == "fenced"


def test_wanted_language_beats_a_later_block_of_another_language() -> None:
    text = "```cpp\nint main() {}\n```\nand to run it:\n```bash\ng++ main.cpp\n```"
    got = extract_code(text, "c++")
    assert (got.code, got.method) == ("int main() {}\n", "fenced")


def test_unterminated_fence_of_the_wanted_language() -> None:
    text = "```bash\necho setup\n```\nThe solution:\n```python\nprint(42)\nprint(43"
    got = extract_code(text, "python")
    assert (got.code, got.method) == ("print(42)\nprint(43\n", "unterminated")


def test_any_fence_prefers_an_untagged_block() -> None:
    text = "```\nprint('untagged')\n```\n```text\nsample output\n```"
    got = extract_code(text, "python")
    assert (got.code, got.method) == ("print('untagged')\n", "fenced_any")


def test_any_fence_falls_back_to_the_last_tagged_block() -> None:
    text = "```ruby\nputs 1\n```\n```text\nputs 2\n```"
    got = extract_code(text, "python")
    assert (got.code, got.method) == ("puts 2\n", "fenced_any")


def test_unterminated_fence_of_any_language() -> None:
    got = extract_code("Here:\n```\nprint(5)\n", "python")
    assert (got.code, got.method) == ("print(5)\n", "unterminated")


def test_raw_text_when_there_is_no_fence() -> None:
    got = extract_code("\nprint(7)\n", "python")
    assert (got.code, got.method) == ("print(7)", "raw")


@pytest.mark.parametrize("text", ["", "   \n\t", "```python\n```", "```python\n   \n```\n"])
def test_empty_extraction_is_reported_not_raised(text: str) -> None:
    got = extract_code(text, "python")
    assert (got.code, got.method) == ("", "empty")


def test_closing_fence_glued_to_the_last_line() -> None:
    got = extract_code("```python\nprint(1)```", "python")
    assert (got.code.strip(), got.method) == ("print(1)", "fenced")


def test_tilde_fences_and_indented_blocks() -> None:
    assert extract_code("~~~python\nx = 1\n~~~", "python").code == "x = 1\n"
    nested = "1. Solution:\n   ```python\n   def f():\n       return 1\n   ```"
    assert extract_code(nested, "python").code == "def f():\n    return 1\n"


def test_reasoning_is_dropped_before_extraction() -> None:
    text = "<think>\n```python\nwrong()\n```\n</think>\n```python\nright()\n```"
    assert extract_code(text, "python").code == "right()\n"
    # The opening tag lived in the prompt: only what follows the last </think> counts.
    assert extract_code("```python\nwrong()\n```\n</think>\nprint(1)", "python").code == "print(1)"


def test_chat_transcript_uses_the_last_assistant_turn() -> None:
    chat = [
        {"role": "user", "content": "```python\nprint('user')\n```"},
        {"role": "assistant", "content": "```python\nprint('first')\n```"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [{"type": "text", "text": "```python\nprint('last')\n```"}]},
    ]
    assert completion_text(chat).startswith("```python")
    assert extract_code(chat, "python").code == "print('last')\n"
    assert extract_code([{"role": "user", "content": "hi"}], "python").method == "empty"


def test_unknown_language_is_a_request_error() -> None:
    with pytest.raises(InvalidRequest, match="unknown language"):
        extract_code("x", "klingon")
