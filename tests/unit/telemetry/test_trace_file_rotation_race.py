"""Reading the trace files while they rotate, with the two interleaved step by step.

A writer thread rotates the files; it makes each change to the file system (an open, a write, a
rename, a removal) only when the reader lets it, and the reader lets it make a set number of them
before each of its own file system calls. So every interleaving of a rotation with a read is
replayed deterministically, whatever the machine's load: a read must give every span of every
file there both when it began and when it ended, and no span twice.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from adk_mesh.telemetry import OtlpJsonFileSpanExporter, read_trace_files

# The writer's calls that change the file system, and the reader's calls that look at it.
_WRITER_CALLS = ("open", "write", "rename", "replace", "unlink", "remove")
_READER_CALLS = ("open", "listdir", "scandir", "stat", "lstat")


class Interleaving:
    """Runs ``write`` in a thread, one file system change per step the reader grants."""

    def __init__(self, write: Callable[[threading.Event], None], steps_per_call: int) -> None:
        self.steps_per_call = steps_per_call
        self.paused = False
        # How many more steps the reader's calls may grant (each read sets it): unbounded, a
        # read of n files would let the writer make some n more, and the files would multiply.
        self.budget = 0
        self.stop = threading.Event()
        self._permit = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._finished = False
        self._free = False
        self._thread = threading.Thread(target=self._run, args=(write,))

    def _run(self, write: Callable[[threading.Event], None]) -> None:
        try:
            write(self.stop)
        finally:
            self._finished = True
            self._done.release()

    def gate(self) -> None:
        """In the writer: wait for a step."""
        if not self._free:
            self._permit.acquire()

    def stepped(self) -> None:
        """In the writer: the step is made."""
        self._done.release()

    def step(self) -> None:
        """In the reader: let the writer make one change, and wait until it has."""
        if self._finished:
            return
        self._permit.release()
        self._done.acquire()

    def before_reader_call(self) -> None:
        if self.paused:
            return
        for _ in range(min(self.steps_per_call, self.budget)):
            self.budget -= 1
            self.step()

    @contextmanager
    def running(self) -> Iterator[None]:
        writer = self._thread
        patch = pytest.MonkeyPatch()

        def wrap(name: str) -> None:
            real = getattr(os, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                if threading.current_thread() is writer:
                    if name not in _WRITER_CALLS:
                        return real(*args, **kwargs)
                    self.gate()
                    try:
                        return real(*args, **kwargs)
                    finally:
                        self.stepped()
                if name in _READER_CALLS:
                    self.before_reader_call()
                return real(*args, **kwargs)

            patch.setattr(os, name, call)

        for name in sorted(set(_WRITER_CALLS) | set(_READER_CALLS)):
            wrap(name)
        writer.start()
        try:
            yield
        finally:
            # The writer runs free to its end: a step it waits for is granted, and no other.
            self.stop.set()
            self._free = True
            self._permit.release()
            writer.join()
            patch.undo()


def tracer_for(exporter: OtlpJsonFileSpanExporter) -> Any:
    provider = TracerProvider(resource=Resource({"service.name": "svc"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("t")


def names_on_disk(directory: Path) -> set[str]:
    """The spans of the files there now (the writer waits: nothing changes meanwhile)."""
    names: set[str] = set()
    for path in directory.iterdir():
        for line in path.read_bytes().splitlines():
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    names.update(span["name"] for span in scope["spans"])
    return names


@pytest.mark.parametrize("backups", [1_000, 4, 2])
@pytest.mark.parametrize("steps_per_call", [1, 2, 3, 5])
def test_a_read_interleaved_with_rotations_loses_and_doubles_no_span(
    tmp_path: Path, steps_per_call: int, backups: int
) -> None:
    # The files were shifted one name up (.2 -> .3, then .1 -> .2, ...) while a reader probed
    # the names upwards: a probe between two renames found a name missing, ended the walk, and
    # the oldest file, one name further up, was not read.
    exporter = OtlpJsonFileSpanExporter(tmp_path, max_bytes=1200, backups=backups)
    tracer = tracer_for(exporter)
    for index in range(12):
        tracer.start_span(f"before-{index:03d}").end()

    def keep_writing(stop: threading.Event) -> None:
        index = 0
        while not stop.is_set():
            tracer.start_span(f"during-{index}").end()
            index += 1

    interleaving = Interleaving(keep_writing, steps_per_call)
    with interleaving.running():
        for read in range(40):
            # Each read starts at another point of the writer's cycle.
            for _ in range(read % 7):
                interleaving.step()
            interleaving.paused = True
            at_start = names_on_disk(tmp_path)
            interleaving.paused = False
            interleaving.budget = 16
            names = [record.name for record in read_trace_files(tmp_path)]
            interleaving.paused = True
            at_end = names_on_disk(tmp_path)
            interleaving.paused = False
            assert len(names) == len(set(names)), f"read {read}: a span read twice"
            missing = (at_start & at_end) - set(names)
            assert not missing, f"read {read}: spans of files still there not read: {missing}"
