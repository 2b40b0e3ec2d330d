def _run_cases(cases, parallel, stop, start, poll):
    # Runs every case (at most ``parallel`` at once), reporting each as it ends; stops starting new
    # ones after a failure when ``stop``. ``start(case)`` starts one and returns its run; ``poll(running)``
    # waits for the next event, takes the runs that ended out of ``running`` and returns them as
    # (case, result) pairs. Returns the cases a memory kill hit while others ran, to judge alone.
    pending = list(cases)
    running = []
    retry = []
    failed = False
    while pending or running:
        while pending and len(running) < parallel and not (stop and failed):
            running.append(start(pending.pop(0)))
        if not running:
            break
        for case, res in poll(running):
            if res["status"] == "memory_exceeded" and parallel > 1:
                retry.append(case)  # memory is shared by the cases running together: judge it alone
                continue
            _report(res)
            failed = failed or res["status"] != "ok"
    return retry
