"""``sandboxkit bench serve_workers``: /run_code req/s of ``sandboxkit serve --workers N`` under ``wrk``.

Issue 30: one server process tops out near 1,000 req/s (846-850 at c=256 on 16 cores), because
one event loop does all the host's Python. This benchmark starts one server per worker count
(``--workers 1``, ``--workers 2``, ...; same ``-j``), all at once on their own ports, and drives
them in turns with ``wrk`` at each concurrency, round after round, so every configuration sees
the same machine (side by side in one run). Each row's answers are checked against the server's
own counters (``/v1/stats``: Success answers gained == requests wrk completed, no non-2xx).

Quick run (``sandboxkit bench serve_workers --quick``): workers 1 and 2, ``-j 16``, c = 64 and
256, 5 s each. On a bigger machine, run it as a script::

    python benchmarks/bench_serve_workers.py --workers 1,8,16 -j 64 --connections 64,256 \\
        --seconds 20 --rounds 2 --threads 4

Rows report the 1-minute load average before and after, since a shared machine's other jobs
take the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

TARGET_RPS_16_CORES = 5000.0


def _sibling(name: str) -> Any:
    """``bench_<name>.py`` of this folder, loaded the way ``sandboxkit bench`` loads it (by path)."""
    from sandboxkit.cli.bench import _load

    return _load(Path(__file__).parent, name)


def measure(
    workers: list[int], concurrency: int, connections: list[int], seconds: int, rounds: int, threads: int
) -> list[dict[str, Any]]:
    """Every (workers, connections) pair, ``rounds`` times, in turns; one dict per wrk run."""
    serve = _sibling("serve")
    servers = {
        n: serve._Server(
            "--backend",
            "subprocess",
            "--max-concurrency",
            str(concurrency),
            "--workers",
            str(n),
            "--log-level",
            "warning",
        )
        for n in workers
    }
    results: list[dict[str, Any]] = []
    try:
        for server in servers.values():  # warm every worker's sandboxes before anything counts
            serve._wrk(server.url, 3, connections=max(connections), threads=threads)
        for round_ in range(rounds):
            for c in connections:
                for n, server in servers.items():
                    load = os.getloadavg()[0]
                    cpu = serve._tree_cpu(server.proc.pid)
                    out = serve._wrk(server.url, seconds, connections=c, threads=threads)
                    if out is None:
                        raise RuntimeError("wrk is not installed (apt-get install wrk)")
                    # CPU of the server, its workers and sandboxes per answer: what a request costs,
                    # whatever else the machine was doing (answers after wrk stopped included).
                    cpu_ms = 1000 * (serve._tree_cpu(server.proc.pid) - cpu) / max(1, out["success_answers"])
                    out |= {"workers": n, "connections": c, "round": round_, "loadavg_before": round(load, 2)}
                    out["cpu_ms_per_request"] = round(cpu_ms, 3)
                    out["loadavg_after"] = round(os.getloadavg()[0], 2)
                    results.append(out)
                    print(json.dumps(out), file=sys.stderr, flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return results


def run(quick: bool = False) -> list[Any]:
    """Workers 1 and 2 at ``-j 16``, wrk at c = 64 and 256; one row per (workers, c), best round."""
    from sandboxkit.benchmarking import Row

    results = measure([1, 2], 16, [64, 256], 5 if quick else 10, 1 if quick else 2, 2)
    rows = []
    for c in (64, 256):
        one = max((r for r in results if r["connections"] == c and r["workers"] == 1), key=lambda r: r["rps"])
        for n in (1, 2):
            best = max((r for r in results if r["connections"] == c and r["workers"] == n), key=lambda r: r["rps"])
            clean = best["non_2xx"] == 0 and not best["socket_errors"] and best["success_answers"] >= best["requests"]
            rows.append(
                Row(
                    "serve_workers",
                    f"POST /run_code python hello (wrk, c={c}, -j 16, --workers {n})",
                    best["requests"],
                    best["p50_ms"],
                    best["p99_ms"],
                    throughput=best["rps"],
                    baseline=f"--workers 1, c={c}",
                    ratio=best["rps"] / one["rps"] if one["rps"] else None,
                    target=f">= {TARGET_RPS_16_CORES:g} req/s on 16 cores",
                    met=None if (os.cpu_count() or 1) < 16 else best["rps"] >= TARGET_RPS_16_CORES and clean,
                    extra={k: best[k] for k in ("success_answers", "non_2xx", "socket_errors", "cpu_ms_per_request")}
                    | {"cpus": os.cpu_count(), "loadavg_before": best["loadavg_before"]}
                    | {
                        "loadavg_after": best["loadavg_after"],
                        "rounds": [r["rps"] for r in results if r["connections"] == c and r["workers"] == n],
                    },
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts, compared side by side")
    parser.add_argument("-j", "--max-concurrency", type=int, default=16)
    parser.add_argument("--connections", default="64,256", help="comma-separated wrk connection counts")
    parser.add_argument("--seconds", type=int, default=10, help="length of each wrk run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    args = parser.parse_args()
    results = measure(
        [int(x) for x in args.workers.split(",")],
        args.max_concurrency,
        [int(x) for x in args.connections.split(",")],
        args.seconds,
        args.rounds,
        args.threads,
    )
    print(f"cpus={os.cpu_count()}  -j {args.max_concurrency}")
    print(
        f"{'workers':>7} {'c':>5} {'round':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ok':>7} {'non2xx':>6} "
        f"{'cpu ms/req':>10} load"
    )
    for r in results:
        print(
            f"{r['workers']:>7} {r['connections']:>5} {r['round']:>5} {r['rps']:>9.1f} {r['p50_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['success_answers']:>7} {r['non_2xx']:>6} {r['cpu_ms_per_request']:>10.2f} "
            f"{r['loadavg_before']}->{r['loadavg_after']} {r['socket_errors']}"
        )


if __name__ == "__main__":
    main()
