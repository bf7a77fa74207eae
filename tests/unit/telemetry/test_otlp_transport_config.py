"""OTLP transport settings from the standard ``OTEL_EXPORTER_OTLP_*`` variables."""

from __future__ import annotations

import logging
import os

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.telemetry._transport import OtlpSettings, transport_from_env


@pytest.fixture(autouse=True)
def _no_otlp_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP_"):
            monkeypatch.delenv(name)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    return monkeypatch


def set_env(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{name}", value)


def test_defaults_are_grpc_to_the_local_collector() -> None:
    for signal in ("traces", "metrics"):
        settings = OtlpSettings.from_env(signal)
        assert settings == OtlpSettings(
            signal=signal, protocol="grpc", endpoint="http://localhost:4317", secure=False
        )
    assert OtlpSettings.from_env("traces").timeout == 10.0


@pytest.mark.parametrize(
    ("variables", "signal", "url"),
    [
        ({}, "traces", "http://localhost:4318/v1/traces"),
        ({}, "metrics", "http://localhost:4318/v1/metrics"),
        # The generic endpoint is a base URL: the signal's path goes under its path.
        ({"ENDPOINT": "http://collector:4318"}, "traces", "http://collector:4318/v1/traces"),
        ({"ENDPOINT": "http://collector:4318/"}, "metrics", "http://collector:4318/v1/metrics"),
        ({"ENDPOINT": "https://c.example/otlp"}, "traces", "https://c.example/otlp/v1/traces"),
        ({"ENDPOINT": "https://c.example/otlp/"}, "traces", "https://c.example/otlp/v1/traces"),
        # The signal's own endpoint is used as it is (with "/" for no path at all).
        ({"TRACES_ENDPOINT": "http://c:4318/custom"}, "traces", "http://c:4318/custom"),
        ({"TRACES_ENDPOINT": "http://c:4318"}, "traces", "http://c:4318/"),
        ({"METRICS_ENDPOINT": "https://c/v1/metrics?x=1"}, "metrics", "https://c/v1/metrics?x=1"),
        (
            {"ENDPOINT": "http://generic:4318", "TRACES_ENDPOINT": "http://specific/v1/traces"},
            "traces",
            "http://specific/v1/traces",
        ),
        (
            {"ENDPOINT": "http://generic:4318", "TRACES_ENDPOINT": "http://specific/v1/traces"},
            "metrics",
            "http://generic:4318/v1/metrics",
        ),
    ],
)
def test_http_endpoint_paths_follow_the_spec(
    env: pytest.MonkeyPatch, variables: dict[str, str], signal: str, url: str
) -> None:
    set_env(env, PROTOCOL="http/protobuf", **variables)

    settings = OtlpSettings.from_env(signal)  # type: ignore[arg-type]

    assert settings.protocol == "http/protobuf"
    assert settings.endpoint == url
    assert settings.secure == url.startswith("https:")


@pytest.mark.parametrize(
    ("variables", "endpoint", "secure"),
    [
        ({"ENDPOINT": "http://collector:4317"}, "http://collector:4317", False),
        ({"ENDPOINT": "https://collector:4317"}, "https://collector:4317", True),
        # A scheme wins over INSECURE, which only speaks for endpoints without one.
        (
            {"ENDPOINT": "https://collector:4317", "INSECURE": "true"},
            "https://collector:4317",
            True,
        ),
        ({"ENDPOINT": "collector:4317"}, "collector:4317", True),
        ({"ENDPOINT": "collector:4317", "INSECURE": "false"}, "collector:4317", True),
        ({"ENDPOINT": "collector:4317", "INSECURE": "TRUE"}, "collector:4317", False),
        ({"ENDPOINT": "collector:4317", "TRACES_INSECURE": "true"}, "collector:4317", False),
        # gRPC does not append signal paths.
        ({"ENDPOINT": "http://collector:4317/"}, "http://collector:4317/", False),
    ],
)
def test_grpc_security_follows_the_scheme_else_insecure(
    env: pytest.MonkeyPatch, variables: dict[str, str], endpoint: str, secure: bool
) -> None:
    set_env(env, **variables)

    settings = OtlpSettings.from_env("traces")

    assert (settings.endpoint, settings.secure) == (endpoint, secure)


def test_an_insecure_value_that_is_not_a_bool_is_false_with_a_warning(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    set_env(env, ENDPOINT="collector:4317", INSECURE="yes")

    with caplog.at_level(logging.WARNING):
        assert OtlpSettings.from_env("traces").secure

    assert "OTEL_EXPORTER_OTLP_INSECURE='yes' is neither true nor false" in caplog.text


def test_signal_specific_variables_win_over_generic_ones(env: pytest.MonkeyPatch) -> None:
    set_env(
        env,
        PROTOCOL="http/protobuf",
        METRICS_PROTOCOL="grpc",
        HEADERS="a=generic",
        TRACES_HEADERS="a=traces",
        TIMEOUT="5000",
        METRICS_TIMEOUT="250",
        COMPRESSION="none",
        TRACES_COMPRESSION="gzip",
        CERTIFICATE="/generic.pem",
        METRICS_CERTIFICATE="/metrics.pem",
    )

    traces = OtlpSettings.from_env("traces")
    metrics = OtlpSettings.from_env("metrics")

    assert (traces.protocol, metrics.protocol) == ("http/protobuf", "grpc")
    assert (traces.headers, metrics.headers) == ((("a", "traces"),), (("a", "generic"),))
    assert (traces.timeout, metrics.timeout) == (5.0, 0.25)
    assert (traces.gzip, metrics.gzip) == (True, False)
    assert (traces.certificate, metrics.certificate) == ("/generic.pem", "/metrics.pem")


def test_headers_are_url_decoded_pairs(env: pytest.MonkeyPatch) -> None:
    set_env(
        env,
        HEADERS=" api-key = s3cr%3Dt ,Authorization=Basic%20dXNlcjpwYXNz==, ,x-empty=,dup=1,dup=2",
    )

    assert OtlpSettings.from_env("traces").headers == (
        ("api-key", "s3cr=t"),
        ("Authorization", "Basic dXNlcjpwYXNz=="),
        ("x-empty", ""),
        ("dup", "1"),
        ("dup", "2"),
    )


@pytest.mark.parametrize("headers", ["novalue", "=s3cret", "bad key=v", "k=line%0Abreak", "é=1"])
def test_a_malformed_header_entry_is_a_config_error(env: pytest.MonkeyPatch, headers: str) -> None:
    set_env(env, TRACES_HEADERS=f"ok=1,{headers}")

    with pytest.raises(
        ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2 is malf"
    ) as caught:
        OtlpSettings.from_env("traces")
    assert headers not in caught.value.message


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"PROTOCOL": "http/json"},
            r"OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported; use one of grpc, "
            r"http/protobuf",
        ),
        ({"TRACES_PROTOCOL": "HTTP"}, r"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='HTTP'"),
        ({"TIMEOUT": "ten"}, r"OTEL_EXPORTER_OTLP_TIMEOUT='ten' is not a positive number"),
        ({"TRACES_TIMEOUT": "0"}, r"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT='0'"),
        ({"TIMEOUT": "-5"}, r"OTEL_EXPORTER_OTLP_TIMEOUT='-5'"),
        ({"TIMEOUT": "inf"}, r"OTEL_EXPORTER_OTLP_TIMEOUT='inf'"),
        (
            {"COMPRESSION": "deflate"},
            r"OTEL_EXPORTER_OTLP_COMPRESSION='deflate' is not supported; use one of gzip, none",
        ),
        (
            {"PROTOCOL": "http/protobuf", "ENDPOINT": "ftp://collector"},
            r"OTEL_EXPORTER_OTLP_ENDPOINT='ftp://collector' is not an http:// or https:// URL",
        ),
        (
            {"PROTOCOL": "http/protobuf", "ENDPOINT": "collector:4318"},
            r"OTEL_EXPORTER_OTLP_ENDPOINT='collector:4318' is not an http",
        ),
        (
            {"PROTOCOL": "http/protobuf", "TRACES_ENDPOINT": "http:///v1/traces"},
            r"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT='http:///v1/traces'",
        ),
        (
            {"ENDPOINT": "http://collector:port"},
            r"OTEL_EXPORTER_OTLP_ENDPOINT='http://collector:port'",
        ),
        ({"ENDPOINT": "https://collector:99999"}, r"'https://collector:99999' is not an http"),
        (
            {"CLIENT_KEY": "/key.pem"},
            r"OTEL_EXPORTER_OTLP_CLIENT_KEY and OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE go together",
        ),
        (
            {"TRACES_CLIENT_CERTIFICATE": "/cert.pem"},
            r"OTEL_EXPORTER_OTLP_CLIENT_KEY and OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        ),
    ],
)
def test_values_that_are_not_allowed_are_config_errors_naming_the_variable(
    env: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    set_env(env, **variables)

    with pytest.raises(ConfigError, match=message):
        transport_from_env("traces")


def test_timeouts_are_milliseconds(env: pytest.MonkeyPatch) -> None:
    set_env(env, TIMEOUT="1500")

    assert OtlpSettings.from_env("metrics").timeout == 1.5


def test_compression_is_case_insensitive(env: pytest.MonkeyPatch) -> None:
    set_env(env, COMPRESSION="GZIP")

    assert OtlpSettings.from_env("traces").gzip


def test_tls_files_and_mutual_tls(env: pytest.MonkeyPatch) -> None:
    set_env(env, CERTIFICATE="/ca.pem", CLIENT_KEY="/key.pem", CLIENT_CERTIFICATE="/cert.pem")

    settings = OtlpSettings.from_env("traces")

    assert (settings.certificate, settings.client_key, settings.client_certificate) == (
        "/ca.pem",
        "/key.pem",
        "/cert.pem",
    )


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_unreadable_certificate_file_is_a_config_error(
    env: pytest.MonkeyPatch, protocol: str, tmp_path: os.PathLike[str]
) -> None:
    missing = os.path.join(tmp_path, "missing.pem")
    set_env(env, PROTOCOL=protocol, ENDPOINT="https://collector:4317", CERTIFICATE=missing)

    with pytest.raises(ConfigError, match="OTLP TLS file"):
        transport_from_env("traces")


@pytest.mark.parametrize(
    ("variables", "protocol", "description"),
    [
        ({}, "grpc", "otlp/grpc http://localhost:4317"),
        ({"ENDPOINT": "collector:4317"}, "grpc", "otlp/grpc collector:4317 (tls)"),
        (
            {"ENDPOINT": "collector:4317", "INSECURE": "true"},
            "grpc",
            "otlp/grpc collector:4317 (insecure)",
        ),
        (
            {"PROTOCOL": "http/protobuf"},
            "http/protobuf",
            "otlp/http http://localhost:4318/v1/traces",
        ),
    ],
)
def test_a_transport_describes_itself(
    env: pytest.MonkeyPatch, variables: dict[str, str], protocol: str, description: str
) -> None:
    set_env(env, **variables)

    transport = transport_from_env("traces")
    try:
        assert (transport.protocol, transport.description) == (protocol, description)
    finally:
        transport.close()
