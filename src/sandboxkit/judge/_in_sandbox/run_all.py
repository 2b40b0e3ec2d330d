_cases = [_Case(i, case) for i, case in enumerate(_D["cases"])]
_stop = _D["stop_on_error"]
try:
    _cpus = len(os.sched_getaffinity(0))
except (AttributeError, OSError):
    _cpus = os.cpu_count() or 1
_parallel = 1 if _stop else max(1, min(len(_cases), _D["parallel"], _cpus))
for _c in _schedule(_cases, _parallel, _stop):
    _schedule([_Case(_c.i, _c.case)], 1, False)
_report({"done": True})
