def test_hello() -> None:
    assert "hel" + "lo" == "hello"
