# ---------------------------------------------------------------- set-up
_TESTS_FD = _tests_file() if any("at" in c for c in _D["cases"]) else None

# Only directories the program cannot write stay importable: the checker imports modules after the
# solution has run, and a module planted in the workspace must not load into it.
# The finders cached for the dropped entries go too (not the whole cache: walking it cost ~0.1 ms).
for _p in [_p for _p in sys.path if _p not in _SAFE_PATH]:
    sys.path_importer_cache.pop(_p, None)
sys.path[:] = [p for p in sys.path if p in _SAFE_PATH]
# Non-dumpable: a process of the same uid cannot ptrace it, read its memory or open /proc/PID/fd.
# Every checker and solution is forked from here, so the checker never is dumpable.
if not set_dumpable(False):
    _report({"cannot": "the harness cannot make itself non-dumpable (prctl is unavailable), so the test "
                       "could not be kept out of the solution's reach"})
    sys.exit(0)
# numpy too when the solution names it: imported once here (from the directories the program cannot
# write, before any of its code exists), not in each case's two processes (about 0.1 s of CPU each),
# and the checker rebuilds the solution's numpy values with it.
for _m in _D["imports"] + (["numpy"] if "numpy" in _D["source"] else []):
    try:
        __import__(_m)
    except BaseException:
        pass
