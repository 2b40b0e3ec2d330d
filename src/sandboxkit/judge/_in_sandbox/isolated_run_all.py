# ---------------------------------------------------------------- main
_cases = list(enumerate(_D["cases"]))
_stop = _D["stop_on_error"]
try:  # the CPUs cases are pinned to, in turn from this one (so concurrent runs start apart)
    _CPUS = sorted(os.sched_getaffinity(0))
    _first = _CPUS.index(_GETCPU()) if _GETCPU is not None else 0
    _CPUS = _CPUS[_first:] + _CPUS[:_first]
except BaseException:
    _CPUS = []
_cpus = len(_CPUS) or os.cpu_count() or 1
_parallel = 1 if _stop else max(1, min(len(_cases), _D["parallel"], _cpus))
for _item in _schedule(_cases, _parallel, _stop):
    _schedule([_item], 1, False)
_report({"done": True})
os._exit(0)
