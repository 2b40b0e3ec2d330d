# Straight-line code, not functions: every code object the harness carries costs each run its
# unmarshalling and the pages it touches.
_null = os.open(os.devnull, os.O_RDWR)  # as in a child: the solution's stdio is /dev/null
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)
os.close(_null)
_report({"inline": 0})
_USED = _cpu_now()
_soft = max(1, -int(-(_USED + _CPU) // 1))  # a backstop, should the program stop SIGPROF
try:
    resource.setrlimit(resource.RLIMIT_CPU, (_soft, _soft + 1))
except (ValueError, OSError):
    pass  # a stricter inherited hard limit stays in force
_T0 = time.monotonic()
signal.signal(signal.SIGALRM, _alarm)
signal.setitimer(signal.ITIMER_REAL, _WALL)
# The time limit to the tick, not to RLIMIT_CPU's whole seconds: SIGPROF's default action ends the
# process once it has used _CPU of CPU time (the host reads that as a timeout).
signal.setitimer(signal.ITIMER_PROF, _CPU)
_payload = _run_case(_D["cases"][0]).encode("utf-8", "backslashreplace")
signal.setitimer(signal.ITIMER_PROF, 0)
signal.setitimer(signal.ITIMER_REAL, 0)
_base = {"i": 0, "t": time.monotonic() - _T0, "cpu": _cpu_now() - _USED}
if _base["cpu"] > _CPU:  # the order of _verdict's checks, for a child that exited 0
    _res = dict(_base, status="timeout", why="cpu")
elif len(_payload) > _CAP_IN:
    _res = dict(_base, status="output_limit")
else:  # _function_verdict reads c.data["res"]: a SimpleNamespace (always loaded) carries it
    _res = _function_verdict(type(sys.implementation)(data={"res": [_payload]}), _base, 0, None)
_report(_res, {"done": True})
os._exit(0)  # the solution's threads and atexit handlers never run after its case, as in a child
