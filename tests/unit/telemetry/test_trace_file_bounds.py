"""The OTLP JSON trace files are bounded: a service's file is rotated when full
(``<service>.jsonl`` -> ``<service>.jsonl.<n>``, ``n`` growing), only a few rotated files are
kept, and ``read_trace_files`` reads the rotated files too, even while a rotation happens."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import OtlpJsonFileSpanExporter, read_trace_files
from adk_mesh.telemetry._file_exporter import (
    DEFAULT_TRACE_FILE_BACKUPS,
    DEFAULT_TRACE_FILE_MAX_BYTES,
    TRACE_FILE_BACKUPS_ENV,
    TRACE_FILE_MAX_BYTES_ENV,
)


def provider_for(exporter: OtlpJsonFileSpanExporter, service: str = "svc") -> TracerProvider:
    provider = TracerProvider(resource=Resource({"service.name": service}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def write_spans(exporter: OtlpJsonFileSpanExporter, names: list[str], service: str = "svc") -> None:
    tracer = provider_for(exporter, service).get_tracer("t")
    for name in names:
        tracer.start_span(name).end()


def test_a_full_trace_file_is_rotated_and_only_the_kept_files_stay(tmp_path: Path) -> None:
    # It grew without bound: a long-running service filled its disk.
    exporter = OtlpJsonFileSpanExporter(tmp_path, max_bytes=4000, backups=2)
    names = [f"span-{index:03d}" for index in range(60)]

    write_spans(exporter, names)

    files = sorted(path.name for path in tmp_path.iterdir())
    # The newest two rotated files, numbered on from the first rotation's 1.
    assert files == ["svc.jsonl", "svc.jsonl.4", "svc.jsonl.5"]
    for path in tmp_path.iterdir():
        assert path.stat().st_size <= 4000
    read = [record.name for record in read_trace_files(tmp_path)]
    # The newest spans, in order, every line of the three files: the oldest were dropped.
    assert read == names[-len(read) :]
    assert 3 < len(read) < len(names)
    line_counts = [len(path.read_text().splitlines()) for path in tmp_path.iterdir()]
    assert sum(line_counts) == len(read)


def test_rotation_is_off_with_a_zero_cap_and_zero_backups_start_the_file_again(
    tmp_path: Path,
) -> None:
    unbounded = OtlpJsonFileSpanExporter(tmp_path / "unbounded", max_bytes=0)
    write_spans(unbounded, [f"span-{index}" for index in range(30)])
    assert [path.name for path in (tmp_path / "unbounded").iterdir()] == ["svc.jsonl"]
    assert len(read_trace_files(tmp_path / "unbounded")) == 30

    no_backups = OtlpJsonFileSpanExporter(tmp_path / "single", max_bytes=2000, backups=0)
    write_spans(no_backups, [f"span-{index}" for index in range(30)])
    assert [path.name for path in (tmp_path / "single").iterdir()] == ["svc.jsonl"]
    assert 0 < len(read_trace_files(tmp_path / "single")) < 30


def test_the_limits_come_from_the_environment_and_have_documented_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_FILE_MAX_BYTES_ENV, raising=False)
    monkeypatch.delenv(TRACE_FILE_BACKUPS_ENV, raising=False)
    default = OtlpJsonFileSpanExporter(tmp_path)
    assert (default.max_bytes, default.backups) == (
        DEFAULT_TRACE_FILE_MAX_BYTES,
        DEFAULT_TRACE_FILE_BACKUPS,
    )
    assert (DEFAULT_TRACE_FILE_MAX_BYTES, DEFAULT_TRACE_FILE_BACKUPS) == (32 * 1024 * 1024, 3)

    monkeypatch.setenv(TRACE_FILE_MAX_BYTES_ENV, " 3000 ")
    monkeypatch.setenv(TRACE_FILE_BACKUPS_ENV, "1")
    configured = OtlpJsonFileSpanExporter(tmp_path / "env")
    assert (configured.max_bytes, configured.backups) == (3000, 1)
    write_spans(configured, [f"span-{index}" for index in range(40)])
    rotated = sorted(path.name for path in (tmp_path / "env").iterdir())
    assert len(rotated) == 2
    assert rotated[0] == "svc.jsonl"
    assert rotated[1].startswith("svc.jsonl.")
    # An argument wins over the environment.
    assert OtlpJsonFileSpanExporter(tmp_path, max_bytes=5, backups=7).backups == 7


@pytest.mark.parametrize("text", ["lots", "-1", "1.5", "10MB"])
@pytest.mark.parametrize("variable", [TRACE_FILE_MAX_BYTES_ENV, TRACE_FILE_BACKUPS_ENV])
def test_a_bad_limit_in_the_environment_is_a_config_error(
    variable: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, text)
    with pytest.raises(ConfigError, match=variable):
        OtlpJsonFileSpanExporter(tmp_path)


@pytest.mark.parametrize(("argument", "value"), [("max_bytes", -1), ("backups", -2)])
def test_a_negative_limit_is_a_config_error(tmp_path: Path, argument: str, value: int) -> None:
    with pytest.raises(ConfigError, match=argument):
        OtlpJsonFileSpanExporter(tmp_path, **{argument: value})  # type: ignore[arg-type]


def test_writers_of_one_file_rotate_it_without_losing_a_line(tmp_path: Path) -> None:
    # Two exporters (two replicas of one service writing one directory) rotate one file: each
    # rotation moves what the other just rotated, unless they take turns (a rotation that
    # renamed the new, almost empty file over the one just rotated lost that whole file).
    exporters = [OtlpJsonFileSpanExporter(tmp_path, max_bytes=1500, backups=500) for _ in "ab"]
    names = {label: [f"{label}-{index:03d}" for index in range(150)] for label in "ab"}
    threads = [
        threading.Thread(target=write_spans, args=(exporter, names[label]))
        for exporter, label in zip(exporters, "ab", strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    read = sorted(record.name for record in read_trace_files(tmp_path))
    assert read == sorted(names["a"] + names["b"])
    assert len(list(tmp_path.iterdir())) > 10


def test_read_trace_files_reads_every_span_while_files_rotate(tmp_path: Path) -> None:
    # A rotation between listing the files and reading them moved spans into a file already
    # read (lost for that read) or into one read next (read twice).
    exporter = OtlpJsonFileSpanExporter(tmp_path, max_bytes=1200, backups=10_000)
    write_spans(exporter, [f"before-{index:03d}" for index in range(40)])
    before = {f"before-{index:03d}" for index in range(40)}
    stop = threading.Event()

    def keep_writing() -> None:
        tracer = provider_for(exporter).get_tracer("t")
        index = 0
        while not stop.is_set():
            tracer.start_span(f"during-{index}").end()
            index += 1

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        for _ in range(40):
            names = [record.name for record in read_trace_files(tmp_path)]
            assert before <= set(names)
            assert len(names) == len(set(names))
    finally:
        stop.set()
        writer.join()


def test_rotated_files_of_a_service_named_like_a_rotated_file_stay_apart(tmp_path: Path) -> None:
    # Service "svc.1" writes svc.1.jsonl; svc's rotated file is svc.jsonl.1: no clash.
    exporter = OtlpJsonFileSpanExporter(tmp_path, max_bytes=1500, backups=3)
    write_spans(exporter, [f"svc-{index}" for index in range(10)])
    write_spans(exporter, ["other"], service="svc.1")
    services = {record.service_name for record in read_trace_files(tmp_path)}
    assert services == {"svc", "svc.1"}
    assert (tmp_path / "svc.1.jsonl").read_text().count("\n") == 1
