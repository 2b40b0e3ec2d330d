def _tests_file():
    # The tests (their expected answers) come on stdin, not in _D: every solution process is a fork of
    # this one, and one that searched its own memory would find them. splice moves them from the pipe
    # into a memory file in the kernel, so they are never in this process's memory; a checker reads
    # its case (pread) after the solution it checks was forked. Older interpreters (no memfd_create or
    # splice) read them through memory: the tests are then in the solutions' memory as before.
    try:
        fd = os.memfd_create("sandboxkit-tests")
    except (AttributeError, OSError):
        return b"".join(iter(lambda: os.read(0, 1 << 16), b""))
    for move in (lambda: os.splice(0, fd, 1 << 20), lambda: os.sendfile(fd, 0, None, 1 << 20)):
        try:
            while move():
                pass
            return fd
        except (AttributeError, OSError):
            continue
    _write_all(fd, b"".join(iter(lambda: os.read(0, 1 << 16), b"")))
    return fd


def _test_of(case):
    # The case's code and bytecode: carried in _D, or at case["at"] in the tests' file.
    if "at" not in case:
        return {}
    at, size = case["at"], case["len"]
    raw = os.pread(_TESTS_FD, size, at) if type(_TESTS_FD) is int else _TESTS_FD[at : at + size]
    return _JSON_LOADS(raw.decode("utf-8"))

