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
A worker that dies leaves the table: the supervisor marks its slot away (``ShareTable.vacate``), so the
others never wait for it, and its replacement, finding the slot away, listens only once warm (``join``).
"""

from __future__ import annotations

import mmap
import os

SLOT = 8  # one signed 64-bit count per worker
# A slot this high takes no connections: its worker drains, died, or is a replacement still warming up.
AWAY = 1 << 62


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
        self._own_write_fd = pipes[index][1]  # join wakes this worker's own event loop too
        self._others = [write for i, (_, write) in enumerate(pipes) if i != index]
        for i, (read, write) in enumerate(pipes):
            os.set_blocking(write, False)
            if i == index:
                os.set_blocking(read, False)
            else:
                os.close(read)  # not ours to use

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

    @property
    def away(self) -> bool:
        # Half of AWAY: connections accepted or closed while away move the count a little.
        return self.counts[self.index] >= AWAY // 2

    def leave(self) -> None:
        """Draining: this worker takes no more connections, so it must not hold the others back."""
        self.counts[self.index] = AWAY
        self.wake_others()

    def join(self) -> None:
        """A replacement worker, now warm, takes its share of connections again. Subtracting (not zeroing)
        keeps any connection it accepted while every other slot was away counted."""
        self.counts[self.index] -= AWAY
        self.wake_others()
        _wake(self._own_write_fd)

    def wake_others(self) -> None:
        for fd in self._others:
            _wake(fd)

    def drain_wakeups(self) -> None:
        try:
            os.read(self.wake_read_fd, 4096)
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.counts.release()
        self._map.close()


class ShareTable:
    """The supervisor's view of a table it created: it keeps every fd for the workers it restarts."""

    def __init__(self, workers: int) -> None:
        self.fds = ConnectionShare.create(workers)
        self._map = mmap.mmap(self.fds[0], SLOT * workers)
        self.counts = memoryview(self._map).cast("q")
        for write in self.fds[2::2]:
            os.set_blocking(write, False)

    def vacate(self, index: int) -> None:
        """A worker died: its slot takes no connections until its replacement joins, and the others, some
        perhaps waiting for it to catch up, check their turn again."""
        self.counts[index] = AWAY
        for write in self.fds[2::2]:
            _wake(write)

    def close(self) -> None:
        self.counts.release()
        self._map.close()
        for fd in self.fds:
            os.close(fd)


def _wake(fd: int) -> None:
    try:
        os.write(fd, b"\0")
    except BlockingIOError:  # its pipe is full of wake-ups it has not read: one more changes nothing
        pass
    except BrokenPipeError:  # nobody reads it any more (the supervisor is gone): nobody to wake
        pass
