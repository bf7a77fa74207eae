"""Timing helpers shared by the benchmarks in ``bench/`` (a helper module, not a benchmark).

A benchmark times zero-argument callables for ``iterations`` calls, ``runs`` times over, and
reports the median run: the median ignores the odd run slowed by another process, which a mean
would not. :func:`measure_interleaved` times the sides of a comparison round by round, in the
order A B, then B A (ABBA), so that a slower moment of the machine falls on every side alike,
with the garbage collector on, as in production and in every other benchmark here (it is
part of what allocating objects costs); a collection before each run starts every side from
the same collector state.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Measurement", "describe_latencies", "format_table", "measure_interleaved"]


@dataclass(frozen=True)
class Measurement:
    """The timed runs of one operation."""

    name: str
    iterations: int
    run_seconds: tuple[float, ...]

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.run_seconds)

    @property
    def per_second(self) -> float:
        """Operations per second in the median run."""
        return self.iterations / self.median_seconds

    @property
    def microseconds_each(self) -> float:
        """Microseconds per operation in the median run."""
        return self.median_seconds / self.iterations * 1e6

    @property
    def spread(self) -> tuple[float, float]:
        """Operations per second in the slowest and the fastest run."""
        return (
            self.iterations / max(self.run_seconds),
            self.iterations / min(self.run_seconds),
        )


def measure_interleaved(
    operations: Sequence[tuple[str, Callable[[], object]]],
    *,
    iterations: int,
    runs: int = 7,
    warmup: int = 1,
) -> list[Measurement]:
    """Time ``iterations`` calls of each named operation, ``runs`` rounds, after ``warmup``
    untimed runs of each: every round runs each operation once, in the given order in even
    rounds and the reverse in odd ones. The measurements come in the given order."""
    if runs < 1 or iterations < 1:
        raise ValueError("runs and iterations must be at least 1")
    loop = range(iterations)
    for _ in range(warmup):
        for _, operation in operations:
            for _ in loop:
                operation()
    timings: list[list[float]] = [[] for _ in operations]
    for number in range(runs):
        order = list(range(len(operations)))
        if number % 2:
            order.reverse()
        for index in order:
            operation = operations[index][1]
            gc.collect()
            start = time.perf_counter()
            for _ in loop:
                operation()
            timings[index].append(time.perf_counter() - start)
    return [
        Measurement(name=name, iterations=iterations, run_seconds=tuple(runs_of))
        for (name, _), runs_of in zip(operations, timings, strict=True)
    ]


def _format_rate(value: float) -> str:
    return f"{value:,.0f}"


def format_table(
    measurements: Sequence[Measurement],
    *,
    unit: str = "ops",
    baseline: Measurement | None = None,
) -> str:
    """A plain-text table: median rate, time per operation, the run spread, and optionally the
    speed relative to ``baseline`` (above 1.0 means faster than the baseline)."""
    headers = [
        "operation",
        f"{unit}/s (median)",
        f"us/{unit.rstrip('s')}",
        f"slowest..fastest {unit}/s",
    ]
    if baseline is not None:
        headers.append("relative speed")
    rows: list[list[str]] = []
    for item in measurements:
        slowest, fastest = item.spread
        row = [
            item.name,
            _format_rate(item.per_second),
            f"{item.microseconds_each:.2f}",
            f"{_format_rate(slowest)}..{_format_rate(fastest)}",
        ]
        if baseline is not None:
            ratio = f"{item.per_second / baseline.per_second:.2f}x"
            row.append(f"{ratio} (baseline)" if item is baseline else ratio)
        rows.append(row)
    widths = [max(len(cells[i]) for cells in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        )

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, rows)])


def describe_latencies(samples: Sequence[float]) -> str:
    """``median … µs   p99 … µs`` of per-call times in microseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(samples):8.1f} µs   p99 {p99:8.1f} µs"
