"""A fake clock for the batcher's injectable `clock` and `call_at`: time moves only when a test moves it, and timers
fire in order (tests/container/neuron/: the batching and admission rules)."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[list] = []  # [when, callback, cancelled]

    def __call__(self) -> float:
        return self.now

    def call_at(self, when: float, callback):
        timer = [when, callback, False]
        self.timers.append(timer)

        class Handle:
            def cancel(self) -> None:
                timer[2] = True

        return Handle()

    def pending(self) -> list[float]:
        return [when for when, _, cancelled in self.timers if not cancelled]

    def advance_to_next_timer(self) -> None:
        timer = min((t for t in self.timers if not t[2]), key=lambda t: t[0])
        self.now = timer[0]
        timer[2] = True
        timer[1]()
