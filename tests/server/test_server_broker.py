"""The broker's book: one run cap and one admission budget for all workers, and nothing lost with a worker."""

from __future__ import annotations

import asyncio
import socket

import pytest

from sandboxkit.server.aggregate import merge_expositions, merge_stats
from sandboxkit.server.broker import BrokerGone, BrokerLink, BrokerServer, SlotBook


def test_slots_are_granted_first_come_first_served_across_workers() -> None:
    book = SlotBook(max_concurrency=2, max_requests=10, max_bytes=100)
    assert book.acquire(0, 1) and book.acquire(1, 1)
    assert not book.acquire(1, 2) and not book.acquire(0, 2) and not book.acquire(1, 3)
    assert book.release(0) == [(1, 2)]  # the oldest waiter, although worker 0 released
    assert book.release(1) == [(0, 2)]
    assert book.in_flight == 2


def test_a_free_slot_is_not_taken_past_a_waiter() -> None:
    book = SlotBook(max_concurrency=1, max_requests=10, max_bytes=100)
    assert book.acquire(0, 1)
    assert not book.acquire(1, 1)
    book.cancel(1, 1)
    assert book.release(0) == []
    assert book.acquire(1, 2)


def test_a_dead_worker_gives_back_all_it_held_and_its_waiters_are_forgotten() -> None:
    book = SlotBook(max_concurrency=2, max_requests=4, max_bytes=100)
    assert book.acquire(0, 1) and book.acquire(0, 2)
    assert not book.acquire(0, 3) and not book.acquire(1, 1)
    assert book.reserve(0, 60, new_request=True) and book.reserve(0, 10, new_request=True)
    assert not book.reserve(1, 40, new_request=True)  # 70 + 40 > 100
    assert book.drop(0) == [(1, 1)]  # worker 0's own waiter is not granted
    assert (book.in_flight, book.requests, book.bytes) == (1, 0, 0)
    assert book.reserve(1, 40, new_request=True)


def test_admission_bounds_requests_and_bytes_for_the_whole_server() -> None:
    book = SlotBook(max_concurrency=1, max_requests=2, max_bytes=50)
    assert book.reserve(0, 500, new_request=True)  # the first request always fits
    book.unreserve(0, 500, request=True)
    assert book.reserve(0, 10, new_request=True) and book.reserve(1, 10, new_request=True)
    assert not book.reserve(2, 1, new_request=True)  # two requests inside
    assert book.reserve(1, 30, new_request=False) and not book.reserve(1, 1, new_request=False)


async def test_link_and_server_over_a_socket_pair() -> None:
    server = BrokerServer(SlotBook(max_concurrency=1, max_requests=2, max_bytes=10))
    links = []
    for worker in range(2):
        ours, theirs = socket.socketpair()
        await server.attach(worker, ours)
        link = BrokerLink()
        await link.connect(theirs)
        links.append(link)
    a, b = links
    await a.acquire_slot()
    waiter = asyncio.ensure_future(b.acquire_slot())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    cancelled = asyncio.ensure_future(b.acquire_slot())
    await asyncio.sleep(0.05)
    cancelled.cancel()
    a.release_slot()
    await asyncio.wait_for(waiter, 5)
    assert await a.reserve(4, new_request=True) == (True, 1)
    assert await b.reserve(1, new_request=True) == (True, 2)
    assert await a.reserve(1, new_request=True) == (False, 2)
    stats = await a.statistics()
    assert stats["runs_in_flight"] == 1 and stats["requests_inside"] == 2 and stats["workers_connected"] == 2
    b.close()  # b dies holding a slot and a request: both come back
    await asyncio.sleep(0.05)
    assert (await a.statistics())["runs_in_flight"] == 0
    assert await a.reserve(1, new_request=True) == (True, 2)
    a.close()
    await asyncio.sleep(0.05)
    with pytest.raises(BrokerGone):
        await a.acquire_slot()


def test_expositions_are_summed_by_name_and_labels() -> None:
    one = b'# HELP x_total X.\n# TYPE x_total counter\nx_total{k="a"} 1.0\nx_total{k="b"} 2.0\n'
    two = b'# HELP x_total X.\n# TYPE x_total counter\nx_total{k="a"} 3.0\n# TYPE g gauge\ng 4.0\n'
    merged = merge_expositions([one, two]).decode()
    assert 'x_total{k="a"} 4' in merged and 'x_total{k="b"} 2' in merged and "\ng 4\n" in merged


def test_stats_sum_counts_and_keep_bounds() -> None:
    merged = merge_stats(
        [
            {"gate": {"admitted": 2, "max_concurrency": 8, "queue_timeout": None}},
            {"gate": {"admitted": 3, "max_concurrency": 8}},
        ]
    )
    assert merged == {"gate": {"admitted": 5, "max_concurrency": 8, "queue_timeout": None}}


def test_session_seats_are_counted_for_the_whole_server_and_freed_with_a_dead_worker() -> None:
    book = SlotBook(max_concurrency=1, max_requests=1, max_bytes=1, max_sessions=2)
    assert book.seat(0) and book.seat(1) and not book.seat(1)
    book.unseat(1)
    assert book.seat(0) and not book.seat(1)
    book.drop(0)
    assert book.seat(1) and book.seat(1) and not book.seat(0)
