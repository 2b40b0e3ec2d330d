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


