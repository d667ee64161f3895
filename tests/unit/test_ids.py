"""Identifiers come from a per-thread pool of OS randomness; no id is ever handed out twice,
not across threads and not across a fork (a real one: the child must not replay the parent's
pool)."""

from __future__ import annotations

import os
import re
import threading

from ctrlrun.canonical import new_id, random_hex32


def test_ids_are_32_hex_digits_and_distinct_past_a_pool_refill():
    drawn = [random_hex32() for _ in range(1000)]  # several 4 KiB pools
    assert all(re.fullmatch(r"[0-9a-f]{32}", d) for d in drawn)
    assert len(set(drawn)) == len(drawn)
    assert re.fullmatch(r"act_[0-9a-f]{32}", new_id("act"))


def test_threads_draw_from_their_own_pools():
    drawn: list[str] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [random_hex32() for _ in range(300)]
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(drawn)) == len(drawn) == 1200


def test_a_forked_child_does_not_replay_its_parent_s_pool():
    random_hex32()  # the parent's pool is filled; the child inherits a copy of it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, "".join(random_hex32() for _ in range(4)).encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 4 * 32).decode()
    parent = "".join(random_hex32() for _ in range(4))
    assert child != parent
