import io


def _stdin_fd(text):
    # A memory file: seekable and sized like a redirected file (``os.fstat(0).st_size`` works, as
    # fast-input solutions expect), and nothing to clean up on disk.
    data = text.encode("utf-8")
    try:
        fd = os.memfd_create("stdin")
    except (AttributeError, OSError):
        import tempfile
        fd, path = tempfile.mkstemp(prefix=".sandboxkit-in-", dir=os.getcwd())
        os.unlink(path)
    _write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _stdio_verdict(c, base, code, signum):
    out = b"".join(c.data["out"]).decode(_ENC, "replace")
    err = b"".join(c.data["err"]).decode(_ENC, "replace")
    state = "ok" if code == 0 else "memory_exceeded" if "MemoryError" in err[-4096:] else "error"
    if state == "memory_exceeded" and not c.alone:
        return dict(base, status=state)
    return dict(base, status=state, code=code, signal=signum, stdout=out, stderr=err[-2000:])


def _child_stdio():
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=_ENC, errors=_ERRORS)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=_ENC, errors=_ERRORS, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=_ENC, errors="backslashreplace", write_through=True)
    sys.argv = [_SRC]
    code = 0
    try:
        exec(_CODE, {"__name__": "__main__", "__file__": _SRC, "__builtins__": builtins})
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # from the solution's frame on
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
