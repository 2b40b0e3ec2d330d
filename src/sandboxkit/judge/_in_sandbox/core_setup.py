import builtins, os, resource, select, signal, sys, time
_SRC = "main.py"


def _report(*objs):
    # repr, not json: importing json (and re with it) would cost every run milliseconds; the host
    # reads these lines with ast.literal_eval.
    text = ""
    for obj in objs:  # several in one write: the host wakes once for them
        text += _MARK + repr(obj) + "\n"
    data = text.encode("utf-8")
    while data:
        data = data[os.write(_OUT, data):]


def _exc_line(e):
    # The last line of traceback.format_exception_only, without importing traceback.
    name = type(e).__qualname__
    module = getattr(type(e), "__module__", "builtins")
    if module not in ("__main__", "builtins"):
        name = "%s.%s" % (module, name)
    try:
        text = str(e)
    except BaseException:
        text = "<exception str() failed>"
    return "%s: %s" % (name, text) if text else name


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _enter_child(keep):
    # Own process group; only the descriptors this case needs survive (another case's pipes, the
    # report channel and the pidfds are closed, so no case can read or forge another's result).
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    for target, fd in enumerate(keep):
        if fd != target:
            os.dup2(fd, target)
    os.closerange(len(keep), 1 << 16)
    soft = max(1, -int(-_CPU // 1))  # whole seconds, rounded up: the kernel's granularity
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    except (ValueError, OSError):
        pass  # a stricter inherited hard limit stays in force


