"""Least-connections between one model's workers: who accepts the next connection on their shared socket.

Each worker batches only the requests of its own connections, so its batches fill only as far as its
share of the connections lets them: the kernel's SO_REUSEPORT hash spread them unevenly (6-10 of 16 per
worker), and a worker with 18 of 32 connections runs a batch of 16 and then one of 2. Here the
workers share one listening socket and a small shared table of their open-connection counts (a
memfd the supervisor creates); a worker listens only while no other worker has fewer connections,
so the counts never differ by more than one. A worker that stops listening because it got ahead
writes a byte to every other worker's wake-up pipe, so those waiting for their turn check again (a
pipe of its own each: on one shared pipe a worker could read its own wake-up and leave the others
asleep, nobody listening).
"""

from __future__ import annotations

import mmap
import os

SLOT = 8  # one signed 64-bit count per worker


class ConnectionShare:
    """One worker's view of the table: its own slot (written only by it) and everyone's counts."""

    def __init__(self, fds: list[int], index: int) -> None:
        """``fds``: what ``create`` returned; ``index``: this worker's."""
        workers = (len(fds) - 1) // 2
        if not 0 <= index < workers:
            raise ValueError(f"worker index {index} outside 0..{workers - 1}")
        self._map = mmap.mmap(fds[0], SLOT * workers)
        self.counts = memoryview(self._map).cast("q")
        self.index = index
        pipes = [(fds[1 + 2 * i], fds[2 + 2 * i]) for i in range(workers)]
        self.wake_read_fd = pipes[index][0]
        self._others = [write for i, (_, write) in enumerate(pipes) if i != index]
        for i, (read, write) in enumerate(pipes):
            os.set_blocking(read if i == index else write, False)
            os.close(write if i == index else read)  # not ours to use

    @staticmethod
    def create(workers: int) -> list[int]:
        """The supervisor's part: the table's fd, then each worker's wake-up pipe (read fd, write fd), all
        inheritable."""
        table = os.memfd_create("inferstack-connections", 0)
        os.ftruncate(table, SLOT * workers)
        fds = [table]
        for _ in range(workers):
            fds += os.pipe()
        for fd in fds:
            os.set_inheritable(fd, True)
        return fds

    @property
    def mine(self) -> int:
        return self.counts[self.index]

    def add(self, delta: int) -> None:
        self.counts[self.index] += delta

    def my_turn(self) -> bool:
        """True while no other worker has fewer open connections than this one."""
        return self.counts[self.index] <= min(self.counts)

    def leave(self) -> None:
        """Draining: this worker takes no more connections, so it must not hold the others back."""
        self.counts[self.index] = 1 << 62
        self.wake_others()

    def wake_others(self) -> None:
        for fd in self._others:
            try:
                os.write(fd, b"\0")
            except BlockingIOError:  # its pipe is full of wake-ups it has not read: one more changes nothing
                pass

    def drain_wakeups(self) -> None:
        try:
            os.read(self.wake_read_fd, 4096)
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.counts.release()
        self._map.close()
