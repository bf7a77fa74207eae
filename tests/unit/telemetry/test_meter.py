"""The lean MeterProvider: aggregation, temporality, observable callbacks, limits, threads,
and the runtime's own instrumentation recorded through it."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from adk_mesh import __version__
from adk_mesh.telemetry import _metrics, _providers
from adk_mesh.telemetry._data import CUMULATIVE, DELTA, HistogramPoint, MetricData, NumberPoint
from adk_mesh.telemetry._meter import (
    DEFAULT_BUCKET_BOUNDARIES,
    TEMPORALITY_PREFERENCE_ENV,
    LeanMeterProvider,
    temporality_from_env,
)

START = 1_000


class Clock:
    """A settable clock in nanoseconds: ``clock.now = ...`` and every reading returns it."""

    def __init__(self, now: int = START) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def provider(clock: Clock) -> Iterator[LeanMeterProvider]:
    provider = LeanMeterProvider(time_ns=clock)
    yield provider
    provider.shutdown()


def collect_metrics(provider: LeanMeterProvider) -> dict[str, MetricData]:
    """One collection, by metric name (tests give their instruments distinct names)."""
    return {metric.name: metric for _, data in provider.collect() for metric in data}


def by_attributes(metric: MetricData) -> dict[frozenset[tuple[str, Any]], Any]:
    return {frozenset(point.attributes.items()): point for point in metric.points}


def only_point(metric: MetricData) -> Any:
    (point,) = metric.points
    return point


def values(metric: MetricData) -> list[int | float]:
    numbers = [point for point in metric.points if isinstance(point, NumberPoint)]
    assert len(numbers) == len(metric.points)
    return [point.value for point in numbers]


# --- Histograms -------------------------------------------------------------------------------


def test_histogram_buckets_are_upper_bound_inclusive(provider: LeanMeterProvider) -> None:
    histogram = provider.get_meter("m").create_histogram(
        "h", explicit_bucket_boundaries_advisory=[1, 2, 5]
    )
    for value in (0, 1, 1.5, 2, 5, 5.0001, 100):
        histogram.record(value)

    point = only_point(collect_metrics(provider)["h"])

    assert isinstance(point, HistogramPoint)
    assert point.explicit_bounds == (1.0, 2.0, 5.0)
    # (-inf, 1]: 0, 1 | (1, 2]: 1.5, 2 | (2, 5]: 5 | (5, +inf): 5.0001, 100
    assert tuple(point.bucket_counts) == (2, 2, 1, 2)
    assert point.count == 7
    assert point.sum == 0 + 1 + 1.5 + 2 + 5 + 5.0001 + 100
    assert (point.min, point.max) == (0.0, 100.0)
    assert all(type(value) is float for value in (point.sum, point.min, point.max))


def test_histogram_default_boundaries(provider: LeanMeterProvider) -> None:
    histogram = provider.get_meter("m").create_histogram("h")
    for value in (0, 0.5, 5, 7500, 10000, 10001):
        histogram.record(value)

    point = only_point(collect_metrics(provider)["h"])

    assert tuple(point.explicit_bounds) == DEFAULT_BUCKET_BOUNDARIES
    assert DEFAULT_BUCKET_BOUNDARIES == (
        0,
        5,
        10,
        25,
        50,
        75,
        100,
        250,
        500,
        750,
        1000,
        2500,
        5000,
        7500,
        10000,
    )
    counts = list(point.bucket_counts)
    assert counts[0] == 1  # 0
    assert counts[1] == 2  # 0.5 and 5
    assert counts[DEFAULT_BUCKET_BOUNDARIES.index(7500)] == 1
    assert counts[DEFAULT_BUCKET_BOUNDARIES.index(10000)] == 1
    assert counts[-1] == 1  # 10001
    assert sum(counts) == point.count == 6


def test_empty_advisory_gives_a_single_bucket(provider: LeanMeterProvider) -> None:
    histogram = provider.get_meter("m").create_histogram(
        "h", explicit_bucket_boundaries_advisory=[]
    )
    histogram.record(3)
    histogram.record(4)

    point = only_point(collect_metrics(provider)["h"])

    assert tuple(point.explicit_bounds) == ()
    assert tuple(point.bucket_counts) == (2,)


@pytest.mark.parametrize(
    "advisory",
    [[2, 1], [1, 1], [0, float("inf")], [float("nan")], ["1", "2"], [True, 2]],
    ids=["decreasing", "repeated", "infinite", "nan", "strings", "bool"],
)
def test_invalid_advisory_falls_back_to_the_defaults(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture, advisory: Sequence[Any]
) -> None:
    histogram = provider.get_meter("m").create_histogram(
        "h", explicit_bucket_boundaries_advisory=advisory
    )
    histogram.record(1)

    assert tuple(only_point(collect_metrics(provider)["h"]).explicit_bounds) == (
        DEFAULT_BUCKET_BOUNDARIES
    )
    assert "explicit_bucket_boundaries_advisory" in caplog.text


def test_histogram_drops_negative_and_non_finite_values_with_one_warning(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture
) -> None:
    histogram = provider.get_meter("m").create_histogram("h")
    for value in (-1, float("nan"), float("inf"), -0.5):
        histogram.record(value)
    histogram.record(2)

    point = only_point(collect_metrics(provider)["h"])

    assert (point.count, point.sum) == (1, 2.0)
    assert sum("dropped the amount" in message for message in caplog.messages) == 1


# --- Sums and gauges --------------------------------------------------------------------------


def test_counter_drops_negative_amounts_with_one_warning(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture
) -> None:
    counter = provider.get_meter("m").create_counter("c")
    counter.add(2)
    counter.add(-1)
    counter.add(-5)
    counter.add(float("nan"))
    counter.add(3)

    metric = collect_metrics(provider)["c"]

    assert (metric.kind, metric.monotonic) == ("sum", True)
    assert only_point(metric).value == 5
    assert sum("dropped the amount" in message for message in caplog.messages) == 1


def test_sums_of_ints_stay_ints(provider: LeanMeterProvider) -> None:
    meter = provider.get_meter("m")
    ints = meter.create_counter("ints")
    mixed = meter.create_counter("mixed")
    ints.add(1)
    ints.add(2)
    mixed.add(1)
    mixed.add(0.5)

    collected = collect_metrics(provider)

    assert type(only_point(collected["ints"]).value) is int
    assert only_point(collected["mixed"]).value == 1.5


def test_up_down_counter_takes_negative_amounts(provider: LeanMeterProvider) -> None:
    counter = provider.get_meter("m").create_up_down_counter("u")
    counter.add(5)
    counter.add(-7)

    metric = collect_metrics(provider)["u"]

    assert (metric.kind, metric.monotonic, metric.temporality) == ("sum", False, CUMULATIVE)
    assert only_point(metric).value == -2


@pytest.mark.parametrize("preference", ["cumulative", "delta", "lowmemory"])
def test_gauge_reports_its_last_value_at_every_collection(clock: Clock, preference: str) -> None:
    provider = LeanMeterProvider(temporality_preference=preference, time_ns=clock)
    gauge = provider.get_meter("m").create_gauge("g", unit="Cel")
    gauge.set(3, {"room": "a"})
    gauge.set(1, {"room": "a"})
    gauge.set(7, {"room": "b"})

    clock.now = 2_000
    first = collect_metrics(provider)["g"]
    clock.now = 3_000
    second = collect_metrics(provider)["g"]

    assert (first.kind, first.unit) == ("gauge", "Cel")
    for metric, now in ((first, 2_000), (second, 3_000)):
        points = by_attributes(metric)
        assert points[frozenset({("room", "a")})] == NumberPoint({"room": "a"}, 0, now, 1)
        assert points[frozenset({("room", "b")})].value == 7


# --- Attribute sets ---------------------------------------------------------------------------


def test_attribute_order_does_not_matter() -> None:
    # A limit of 1 keeps the fast-key cache at two entries: the third order clears it.
    provider = LeanMeterProvider(cardinality_limit=1)
    counter = provider.get_meter("m").create_counter("c")
    for attributes in (
        {"a": "1", "b": "2", "c": "3"},
        {"c": "3", "b": "2", "a": "1"},
        {"b": "2", "a": "1", "c": "3"},
        {"a": "1", "b": "2", "c": "3"},
    ):
        counter.add(1, attributes)

    point = only_point(collect_metrics(provider)["c"])

    assert point.value == 4
    assert point.attributes == {"a": "1", "b": "2", "c": "3"}


def test_none_and_empty_attributes_are_one_series(provider: LeanMeterProvider) -> None:
    counter = provider.get_meter("m").create_counter("c")
    counter.add(1)
    counter.add(1, {})
    counter.add(1, None)

    assert only_point(collect_metrics(provider)["c"]) == NumberPoint({}, START, START, 3)


def test_reported_attributes_are_a_copy(provider: LeanMeterProvider) -> None:
    counter = provider.get_meter("m").create_counter("c")
    attributes: dict[str, Any] = {"k": "v"}
    counter.add(1, attributes)
    attributes["k"] = "changed"
    counter.add(1, attributes)

    points = by_attributes(collect_metrics(provider)["c"])

    assert points[frozenset({("k", "v")})].value == 1
    assert points[frozenset({("k", "changed")})].value == 1


def test_list_valued_attributes(provider: LeanMeterProvider) -> None:
    histogram = provider.get_meter("m").create_histogram("h")
    tags = ["x", "y"]
    histogram.record(1, {"tags": tags, "n": "1"})
    histogram.record(2, {"n": "1", "tags": ["x", "y"]})
    histogram.record(3, {"tags": ("x", "y"), "n": "1"})
    histogram.record(4, {"tags": ["y", "x"], "n": "1"})
    tags.append("z")  # the recorded attribute set does not change with the caller's list

    points = by_attributes(collect_metrics(provider)["h"])

    assert points[frozenset({("tags", ("x", "y")), ("n", "1")})].count == 3
    assert points[frozenset({("tags", ("y", "x")), ("n", "1")})].count == 1
    assert len(points) == 2


def test_values_python_deems_equal_are_distinct_attribute_values(
    provider: LeanMeterProvider,
) -> None:
    counter = provider.get_meter("m").create_counter("c")
    for value in ("1", 1, True, 1.0, 1, True):
        counter.add(1, {"v": value})

    metric = collect_metrics(provider)["c"]

    reported = sorted(
        (repr(point.attributes["v"]), value)
        for point, value in zip(metric.points, values(metric), strict=True)
    )
    assert reported == [("'1'", 1), ("1", 2), ("1.0", 1), ("True", 2)]


# --- Temporality ------------------------------------------------------------------------------


def test_cumulative_points_accumulate_from_their_series_creation(clock: Clock) -> None:
    provider = LeanMeterProvider(time_ns=clock)
    meter = provider.get_meter("m")
    counter = meter.create_counter("c")
    histogram = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[10])

    clock.now = 1_100
    counter.add(1, {"k": "a"})
    histogram.record(5)
    clock.now = 2_000
    first = collect_metrics(provider)
    clock.now = 2_500
    counter.add(2, {"k": "a"})
    counter.add(1, {"k": "b"})
    histogram.record(20)
    clock.now = 3_000
    second = collect_metrics(provider)
    clock.now = 4_000
    third = collect_metrics(provider)

    assert first["c"].temporality == CUMULATIVE
    assert first["c"].points == [NumberPoint({"k": "a"}, 1_100, 2_000, 1)]
    assert by_attributes(second["c"]) == {
        frozenset({("k", "a")}): NumberPoint({"k": "a"}, 1_100, 3_000, 3),
        frozenset({("k", "b")}): NumberPoint({"k": "b"}, 2_500, 3_000, 1),
    }
    assert values(third["c"]) == [3, 1]
    histogram_point = only_point(third["h"])
    assert (histogram_point.start_time_unix_nano, histogram_point.time_unix_nano) == (1_100, 4_000)
    assert (histogram_point.count, tuple(histogram_point.bucket_counts)) == (2, (1, 1))
    assert (histogram_point.min, histogram_point.max) == (5.0, 20.0)


def test_delta_points_cover_the_time_since_the_previous_collection(clock: Clock) -> None:
    provider = LeanMeterProvider(temporality_preference="delta", time_ns=clock)
    meter = provider.get_meter("m")
    counter = meter.create_counter("c")
    histogram = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[10])

    clock.now = 1_500
    counter.add(1, {"k": "a"})
    histogram.record(5)
    histogram.record(50)
    clock.now = 2_000
    first = collect_metrics(provider)
    clock.now = 2_500
    counter.add(4, {"k": "b"})
    clock.now = 3_000
    second = collect_metrics(provider)
    clock.now = 4_000
    third = collect_metrics(provider)
    histogram.record(7)
    clock.now = 5_000
    fourth = collect_metrics(provider)

    assert first["c"].temporality == DELTA
    assert first["c"].points == [NumberPoint({"k": "a"}, START, 2_000, 1)]
    assert second["c"].points == [NumberPoint({"k": "b"}, 2_000, 3_000, 4)]
    assert "h" not in second
    assert third == {}
    first_histogram, fourth_histogram = only_point(first["h"]), only_point(fourth["h"])
    assert (first_histogram.count, first_histogram.min, first_histogram.max) == (2, 5.0, 50.0)
    assert (fourth_histogram.start_time_unix_nano, fourth_histogram.time_unix_nano) == (
        4_000,
        5_000,
    )
    assert (fourth_histogram.count, fourth_histogram.min, fourth_histogram.max) == (1, 7.0, 7.0)
    assert tuple(fourth_histogram.bucket_counts) == (1, 0)


@pytest.mark.parametrize(
    ("preference", "delta_metrics"),
    [
        ("cumulative", set()),
        ("CUMULATIVE", set()),
        ("delta", {"counter", "histogram", "observable_counter"}),
        ("Delta", {"counter", "histogram", "observable_counter"}),
        ("lowmemory", {"counter", "histogram"}),
        ("LowMemory", {"counter", "histogram"}),
    ],
)
def test_temporality_per_preference_and_kind(preference: str, delta_metrics: set[str]) -> None:
    provider = LeanMeterProvider(temporality_preference=preference)
    meter = provider.get_meter("m")
    meter.create_counter("counter").add(1)
    meter.create_up_down_counter("up_down_counter").add(1)
    meter.create_histogram("histogram").record(1)
    meter.create_observable_counter("observable_counter", [lambda _: [Observation(1)]])
    meter.create_observable_up_down_counter(
        "observable_up_down_counter", [lambda _: [Observation(1)]]
    )

    collected = collect_metrics(provider)

    assert len(collected) == 5
    for name, metric in collected.items():
        assert metric.temporality == (DELTA if name in delta_metrics else CUMULATIVE), name


def test_unknown_preference_and_bad_limit_are_refused() -> None:
    with pytest.raises(ValueError, match="temporality_preference"):
        LeanMeterProvider(temporality_preference="sometimes")
    with pytest.raises(ValueError, match="cardinality_limit"):
        LeanMeterProvider(cardinality_limit=0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "cumulative"),
        ("", "cumulative"),
        ("cumulative", "cumulative"),
        ("DELTA", "delta"),
        (" LowMemory ", "lowmemory"),
    ],
)
def test_temporality_from_env(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is None:
        monkeypatch.delenv(TEMPORALITY_PREFERENCE_ENV, raising=False)
    else:
        monkeypatch.setenv(TEMPORALITY_PREFERENCE_ENV, value)
    assert temporality_from_env() == expected


def test_unknown_temporality_from_env_warns_and_means_cumulative(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(TEMPORALITY_PREFERENCE_ENV, "hourly")

    assert temporality_from_env() == "cumulative"
    assert "hourly" in caplog.text


# --- Observable instruments -------------------------------------------------------------------


def test_observable_callbacks_run_at_each_collection(clock: Clock) -> None:
    provider = LeanMeterProvider(time_ns=clock)
    meter = provider.get_meter("m")
    calls: list[CallbackOptions] = []
    heap = iter([100, 80])

    def cpu_time(options: CallbackOptions) -> Iterable[Observation]:
        calls.append(options)
        return [Observation(len(calls) * 10, {"cpu": "0"}), Observation(1, {"cpu": "1"})]

    def temperatures(options: CallbackOptions) -> Iterator[Observation]:
        yield Observation(21.5, {"room": "a"})
        yield Observation(float("nan"), {"room": "b"})  # dropped

    meter.create_observable_counter("cpu.time", [cpu_time], unit="s")
    meter.create_observable_up_down_counter("heap", [lambda _: [Observation(next(heap))]])
    meter.create_observable_gauge("temperature", [temperatures])

    clock.now = 2_000
    first = collect_metrics(provider)
    clock.now = 3_000
    second = collect_metrics(provider)

    assert len(calls) == 2
    assert all(isinstance(options, CallbackOptions) for options in calls)
    assert by_attributes(first["cpu.time"]) == {
        frozenset({("cpu", "0")}): NumberPoint({"cpu": "0"}, START, 2_000, 10),
        frozenset({("cpu", "1")}): NumberPoint({"cpu": "1"}, START, 2_000, 1),
    }
    assert (first["cpu.time"].temporality, first["cpu.time"].monotonic) == (CUMULATIVE, True)
    assert by_attributes(second["cpu.time"])[frozenset({("cpu", "0")})].value == 20
    assert values(first["heap"]) == [100]
    assert values(second["heap"]) == [80]
    assert first["heap"].monotonic is False
    assert first["temperature"].kind == "gauge"
    assert first["temperature"].points == [NumberPoint({"room": "a"}, 0, 2_000, 21.5)]


def test_a_raising_callback_is_logged_and_skipped(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture
) -> None:
    meter = provider.get_meter("m")

    def broken(options: CallbackOptions) -> Iterator[Observation]:
        yield Observation(1, {"from": "broken"})
        raise RuntimeError("sensor unplugged")

    def divides_by_zero(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(1 / 0)]

    meter.create_observable_gauge(
        "g", [broken, lambda _: [Observation(5, {"from": "working"})], divides_by_zero]
    )
    meter.create_counter("c").add(1)

    collected = collect_metrics(provider)

    # None of the broken callback's observations count, not even those before it failed.
    assert collected["g"].points == [NumberPoint({"from": "working"}, 0, START, 5)]
    assert only_point(collected["c"]).value == 1
    failures = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(failures) == 2
    assert all(record.exc_info for record in failures)


def test_generator_callbacks_receive_the_options(provider: LeanMeterProvider) -> None:
    received: list[CallbackOptions] = []

    def observe() -> Generator[Iterable[Observation], CallbackOptions, None]:
        options = yield []
        for total in (3, 9):
            received.append(options)
            options = yield [Observation(total)]

    provider.get_meter("m").create_observable_counter("c", [observe()])

    collected = [collect_metrics(provider) for _ in range(3)]

    assert [values(metrics["c"]) for metrics in collected[:2]] == [[3], [9]]
    assert "c" not in collected[2]  # the generator is exhausted: no observations
    assert len(received) == 2
    assert all(isinstance(options, CallbackOptions) for options in received)


def test_delta_observable_counter_reports_growth_since_the_previous_observation(
    clock: Clock,
) -> None:
    provider = LeanMeterProvider(temporality_preference="delta", time_ns=clock)
    totals = iter([10, 15, 15, 12, 20])
    provider.get_meter("m").create_observable_counter(
        "c", [lambda _: [Observation(next(totals), {"disk": "sda"})]]
    )

    points = []
    for now in (2_000, 3_000, 4_000, 5_000, 6_000):
        clock.now = now
        points.append(only_point(collect_metrics(provider)["c"]))

    # 12 after 15 is a restart from zero: its delta is the whole new total.
    assert [point.value for point in points] == [10, 5, 0, 12, 8]
    assert [(point.start_time_unix_nano, point.time_unix_nano) for point in points] == [
        (START, 2_000),
        (2_000, 3_000),
        (3_000, 4_000),
        (4_000, 5_000),
        (5_000, 6_000),
    ]


def test_observations_of_one_attribute_set_add_up_except_for_gauges(
    provider: LeanMeterProvider,
) -> None:
    meter = provider.get_meter("m")
    twice = [lambda _: [Observation(2, {"k": "v"}), Observation(3, {"k": "v"})]]
    meter.create_observable_counter("c", twice)
    meter.create_observable_gauge("g", twice)

    collected = collect_metrics(provider)

    assert only_point(collected["c"]).value == 5
    assert only_point(collected["g"]).value == 3


# --- Instrument registration ------------------------------------------------------------------


def test_the_same_instrument_asked_again_is_the_same_stream(provider: LeanMeterProvider) -> None:
    meter = provider.get_meter("m")
    first = meter.create_counter("Requests", unit="1", description="d")
    again = meter.create_counter("requests", unit="1", description="d")
    first.add(1)
    again.add(2)

    collected = provider.collect()

    assert again is first
    ((_, data),) = collected
    assert [(metric.name, only_point(metric).value) for metric in data] == [("Requests", 3)]


def test_the_same_name_with_another_identity_is_a_separate_stream(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture
) -> None:
    meter = provider.get_meter("m")
    counter = meter.create_counter("x", unit="1")
    other_unit = meter.create_counter("x", unit="By")
    histogram = meter.create_histogram("X")
    counter.add(1)
    other_unit.add(2)
    histogram.record(3)

    ((_, data),) = provider.collect()

    assert other_unit is not counter
    assert [(metric.name, metric.kind, metric.unit) for metric in data] == [
        ("x", "sum", "1"),
        ("x", "sum", "By"),
        ("X", "histogram", ""),
    ]
    assert sum("separate stream" in message for message in caplog.messages) == 2


def test_a_histogram_asked_again_keeps_its_first_boundaries(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture
) -> None:
    meter = provider.get_meter("m")
    first = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[1, 2])
    again = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[5])
    same = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[1, 2])
    again.record(1.5)

    assert again is first is same
    assert tuple(only_point(collect_metrics(provider)["h"]).explicit_bounds) == (1.0, 2.0)
    assert sum("keeping them" in message for message in caplog.messages) == 1


def test_an_observable_asked_again_gains_the_new_callbacks(provider: LeanMeterProvider) -> None:
    meter = provider.get_meter("m")
    first = meter.create_observable_counter("c", [lambda _: [Observation(1, {"from": "a"})]])
    again = meter.create_observable_counter("c", [lambda _: [Observation(2, {"from": "b"})]])

    points = by_attributes(collect_metrics(provider)["c"])

    assert again is first
    assert {key: point.value for key, point in points.items()} == {
        frozenset({("from", "a")}): 1,
        frozenset({("from", "b")}): 2,
    }


@pytest.mark.parametrize(
    ("name", "unit"),
    [("", ""), ("1st", ""), ("has space", ""), ("x" * 256, ""), ("ok", "µs"), ("ok", "u" * 64)],
)
def test_an_invalid_name_or_unit_gives_a_no_op_instrument(
    provider: LeanMeterProvider, caplog: pytest.LogCaptureFixture, name: str, unit: str
) -> None:
    meter = provider.get_meter("m")
    counter = meter.create_counter(name, unit=unit)
    histogram = meter.create_histogram(name, unit=unit)
    gauge = meter.create_observable_gauge(name, [lambda _: [Observation(1)]], unit=unit)
    counter.add(1)
    histogram.record(1)

    assert isinstance(counter, metrics.NoOpCounter)
    assert isinstance(histogram, metrics.NoOpHistogram)
    assert isinstance(gauge, metrics.NoOpObservableGauge)
    assert provider.collect() == []
    assert sum(record.levelno == logging.ERROR for record in caplog.records) == 3


def test_a_long_valid_name_is_accepted(provider: LeanMeterProvider) -> None:
    name = "a" + "-_./" * 63 + "b9"
    provider.get_meter("m").create_counter(name).add(1)

    assert list(collect_metrics(provider)) == [name]


def test_meters_by_scope(provider: LeanMeterProvider) -> None:
    meter = provider.get_meter("lib", "1.0", "https://schema", {"team": "x"})
    assert provider.get_meter("lib", "1.0", "https://schema") is meter
    assert provider.get_meter("lib", "2.0") is not meter
    assert provider.get_meter("lib") is provider.get_meter("lib", None, "")
    meter.create_counter("c").add(1)
    provider.get_meter("idle").create_counter("c")

    ((scope, data),) = provider.collect()

    assert (scope.name, scope.version, scope.schema_url, dict(scope.attributes)) == (
        "lib",
        "1.0",
        "https://schema",
        {"team": "x"},
    )
    assert [metric.name for metric in data] == ["c"]


# --- Cardinality ------------------------------------------------------------------------------


def test_attribute_sets_beyond_the_limit_go_to_the_overflow_series(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = LeanMeterProvider(cardinality_limit=3)
    counter = provider.get_meter("m").create_counter("c")
    for user in range(6):
        counter.add(1, {"user": str(user)})
    counter.add(10, {"user": "0"})  # a set seen before the limit keeps its series
    counter.add(100, {"user": "5"})

    points = by_attributes(collect_metrics(provider)["c"])

    assert {key: point.value for key, point in points.items()} == {
        frozenset({("user", "0")}): 11,
        frozenset({("user", "1")}): 1,
        frozenset({("user", "2")}): 1,
        frozenset({("otel.metric.overflow", True)}): 103,
    }
    assert sum("cardinality limit" in message for message in caplog.messages) == 1


def test_delta_series_count_against_the_limit_per_collection() -> None:
    provider = LeanMeterProvider(temporality_preference="delta", cardinality_limit=2)
    histogram = provider.get_meter("m").create_histogram("h")
    for user in "abc":
        histogram.record(1, {"user": user})
    first = by_attributes(collect_metrics(provider)["h"])
    for user in "cd":
        histogram.record(1, {"user": user})
    second = by_attributes(collect_metrics(provider)["h"])

    assert set(first) == {
        frozenset({("user", "a")}),
        frozenset({("user", "b")}),
        frozenset({("otel.metric.overflow", True)}),
    }
    assert set(second) == {frozenset({("user", "c")}), frozenset({("user", "d")})}


def test_observations_beyond_the_limit_go_to_the_overflow_series() -> None:
    provider = LeanMeterProvider(cardinality_limit=2)
    observations = [Observation(1, {"cpu": str(cpu)}) for cpu in range(5)]
    provider.get_meter("m").create_observable_counter("c", [lambda _: observations])

    points = by_attributes(collect_metrics(provider)["c"])

    assert {key: point.value for key, point in points.items()} == {
        frozenset({("cpu", "0")}): 1,
        frozenset({("cpu", "1")}): 1,
        frozenset({("otel.metric.overflow", True)}): 3,
    }


# --- Shutdown ---------------------------------------------------------------------------------


def test_after_shutdown_measurements_are_dropped_and_collect_is_empty() -> None:
    provider = LeanMeterProvider()
    meter = provider.get_meter("m")
    counter = meter.create_counter("c")
    histogram = meter.create_histogram("h")
    calls: list[CallbackOptions] = []

    def observe(options: CallbackOptions) -> Iterable[Observation]:
        calls.append(options)
        return [Observation(1)]

    meter.create_observable_gauge("g", [observe])
    counter.add(1)

    provider.shutdown()
    provider.shutdown()
    counter.add(1)
    histogram.record(1)

    assert provider.collect() == []
    assert calls == []
    assert isinstance(meter.create_counter("later"), metrics.NoOpCounter)
    assert isinstance(provider.get_meter("later"), metrics.NoOpMeter)


# --- Threads ----------------------------------------------------------------------------------


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond, not every 5 ms: races show up in a short test."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("frequent_thread_switches")
@pytest.mark.parametrize("preference", ["cumulative", "delta"])
def test_concurrent_records_and_collections_lose_and_double_count_nothing(
    preference: str,
) -> None:
    provider = LeanMeterProvider(temporality_preference=preference)
    meter = provider.get_meter("m")
    histogram = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[0.5])
    counter = meter.create_counter("c")
    attribute_sets = [
        {"route": "a"},
        {"route": "b", "method": "GET"},
        {"method": "GET", "route": "b"},
    ]
    threads, records_per_thread = 4, 10_000
    recorders_done = threading.Event()
    collections: list[dict[str, MetricData]] = []

    def record(thread: int) -> None:
        for index in range(records_per_thread):
            attributes = attribute_sets[(thread + index) % len(attribute_sets)]
            histogram.record(index % 2, attributes)
            counter.add(1, attributes)

    def collect_until_done() -> None:
        while not recorders_done.is_set():
            collections.append(collect_metrics(provider))

    collector = threading.Thread(target=collect_until_done)
    recorders = [threading.Thread(target=record, args=(thread,)) for thread in range(threads)]
    collector.start()
    for recorder in recorders:
        recorder.start()
    for recorder in recorders:
        recorder.join()
    recorders_done.set()
    collector.join()
    collections.append(collect_metrics(provider))

    def totals(collected: dict[str, MetricData]) -> tuple[int, int, int]:
        """Histogram count, of it the values in the upper bucket, and counter sum."""
        points = [
            point
            for point in (collected["h"].points if "h" in collected else [])
            if isinstance(point, HistogramPoint)
        ]
        return (
            sum(point.count for point in points),
            sum(point.bucket_counts[1] for point in points),
            int(sum(values(collected["c"]) if "c" in collected else [])),
        )

    measured = [totals(collected) for collected in collections]
    total = threads * records_per_thread
    if preference == "delta":
        assert tuple(map(sum, zip(*measured, strict=True))) == (total, total // 2, total)
    else:
        assert measured[-1] == (total, total // 2, total)
        assert measured == sorted(measured)  # cumulative totals never go back
        assert len(collections[-1]["h"].points) == 2  # the two orders of route b are one set
    assert len(collections) > 2


# --- The runtime's instrumentation ------------------------------------------------------------


def test_the_runtime_instrumentation_records_through_the_lean_provider(clock: Clock) -> None:
    provider = LeanMeterProvider(time_ns=clock)
    with _providers.use_meter_provider(provider):
        _metrics.record_model_call(
            0.3,
            provider="openai",
            request_model="gpt-4o",
            response_model="gpt-4o-2024",
            input_tokens=100,
            output_tokens=20,
            error_type=None,
        )
        _metrics.record_model_call(
            1.2,
            provider="openai",
            request_model="gpt-4o",
            response_model="gpt-4o-2024",
            input_tokens=300,
            output_tokens=None,
            error_type=None,
        )
        _metrics.record_tool_duration(0.01, "search", None)
        _metrics.record_tool_duration(0.02, "search", "TimeoutError")
        _metrics.record_error("execute_tool", "TimeoutError")
        _metrics.record_error("execute_tool", "TimeoutError")
        clock.now = 9_000
        collected = provider.collect()

    ((scope, data),) = collected
    assert (scope.name, scope.version) == (_providers.INSTRUMENTATION_NAME, __version__)
    by_name = {metric.name: metric for metric in data}
    chat = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024",
    }

    duration = only_point(by_name["gen_ai.client.operation.duration"])
    assert (by_name["gen_ai.client.operation.duration"].unit, duration.attributes) == ("s", chat)
    assert (duration.count, duration.sum, duration.time_unix_nano) == (2, 1.5, 9_000)
    bounds = list(duration.explicit_bounds)
    assert duration.bucket_counts[bounds.index(0.5)] == 1  # 0.3 in (0.25, 0.5]
    assert duration.bucket_counts[bounds.index(2.5)] == 1  # 1.2 in (1, 2.5]

    tokens = by_attributes(by_name["gen_ai.client.token.usage"])
    input_tokens = tokens[frozenset({**chat, "gen_ai.token.type": "input"}.items())]
    output_tokens = tokens[frozenset({**chat, "gen_ai.token.type": "output"}.items())]
    assert (input_tokens.count, input_tokens.sum, input_tokens.max) == (2, 400.0, 300.0)
    assert (output_tokens.count, output_tokens.sum) == (1, 20.0)

    tools = by_attributes(by_name["adk_mesh.tool.duration"])
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    assert tools[frozenset(tool.items())].sum == 0.01
    assert tools[frozenset({**tool, "error.type": "TimeoutError"}.items())].count == 1

    errors = by_name["adk_mesh.errors"]
    assert (errors.kind, errors.monotonic, errors.unit) == ("sum", True, "{error}")
    assert errors.points == [
        NumberPoint(
            {"adk_mesh.operation": "execute_tool", "error.type": "TimeoutError"}, START, 9_000, 2
        )
    ]


# --- Property: a histogram point is the straightforward computation ---------------------------

_values = st.one_of(
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=1000),
    st.sampled_from([0, 0.5, 1, 2.5, 10, 100]),  # likely boundaries: the inclusive edge
)
_boundaries = st.lists(
    st.one_of(
        st.floats(min_value=-10, max_value=1e6, allow_nan=False), st.sampled_from([0, 1, 10])
    ),
    max_size=8,
    unique=True,
).map(sorted)
_attribute_sets = st.sampled_from([None, {"k": "a"}, {"k": "b", "z": "1"}, {"z": "1", "k": "b"}])


def _reference(
    values: Sequence[float], boundaries: Sequence[float]
) -> tuple[int, float, float, float, list[int]]:
    total: float = 0
    for value in values:
        total += value
    buckets = [0] * (len(boundaries) + 1)
    for value in values:
        index = 0
        while index < len(boundaries) and value > boundaries[index]:
            index += 1
        buckets[index] += 1
    return len(values), total, min(values), max(values), buckets


@settings(max_examples=200, deadline=None)
@given(
    measurements=st.lists(st.tuples(_values, _attribute_sets), min_size=1, max_size=60),
    boundaries=_boundaries,
)
def test_histogram_points_match_a_reference_computation(
    measurements: list[tuple[float, Mapping[str, str] | None]], boundaries: list[float]
) -> None:
    provider = LeanMeterProvider()
    histogram = provider.get_meter("m").create_histogram(
        "h", explicit_bucket_boundaries_advisory=boundaries
    )
    for value, attributes in measurements:
        histogram.record(value, attributes)

    points = by_attributes(collect_metrics(provider)["h"])

    expected_by_set: dict[frozenset[tuple[str, Any]], list[float]] = {}
    for value, attributes in measurements:
        expected_by_set.setdefault(frozenset((attributes or {}).items()), []).append(value)
    assert set(points) == set(expected_by_set)
    for key, values in expected_by_set.items():
        point = points[key]
        count, total, smallest, largest, buckets = _reference(values, boundaries)
        assert (point.count, point.sum, point.min, point.max) == (count, total, smallest, largest)
        assert list(point.bucket_counts) == buckets
        assert list(point.explicit_bounds) == boundaries
