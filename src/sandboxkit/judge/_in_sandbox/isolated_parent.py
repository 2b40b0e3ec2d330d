# ---------------------------------------------------------------- the parent


def _place(keep):
    # keep[k] becomes descriptor k; every other descriptor is closed. Copies above all of them first,
    # so moving one into place never overwrites another still to move.
    base = max(keep) + 1
    high = [os.dup2(fd, base + k) for k, fd in enumerate(keep)]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(keep), 1 << 16)


def _enter(keep):
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _place(keep)
    soft = max(1, -int(-_CPU // 1))
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    except (ValueError, OSError):
        pass


