"""What operators read, in-process: the bounded ``endpoint`` label, the metrics settings, JSON
log lines with their tracebacks, and URL secrets scrubbed from errors and log records."""

from __future__ import annotations

import io
import json
import logging

import pytest

from hookline.core import metrics, redact
from hookline.core.config import load_settings, setting_names
from hookline.core.logs import JsonFormatter, configure_worker_logging, log_event
from hookline.core.metrics import OTHER, UNKNOWN, EndpointLabels


def series(endpoint_id: str) -> list[str]:
    """Every sample of this process's endpoint-labelled metrics naming ``endpoint_id``."""
    return [sample.name for metric, _ in metrics.BY_ENDPOINT for family in metric.collect()
            for sample in family.samples if sample.labels.get("endpoint") == endpoint_id]


# -- settings -------------------------------------------------------------------------------

def test_metrics_listen_on_loopback_unless_told_otherwise():
    settings = load_settings({})
    assert (settings.metrics_address, settings.metrics_max_endpoints) == ("127.0.0.1", 200)
    assert load_settings({"HOOKLINE_METRICS_ADDRESS": "0.0.0.0"}).metrics_address == "0.0.0.0"
    assert load_settings({"HOOKLINE_METRICS_ADDRESS": "[::]"}).metrics_address == "::"
    assert load_settings({"HOOKLINE_METRICS_MAX_ENDPOINTS": "0"}).metrics_max_endpoints == 0
    assert {"HOOKLINE_METRICS_ADDRESS", "HOOKLINE_METRICS_MAX_ENDPOINTS"} <= setting_names()


# -- the endpoint label ---------------------------------------------------------------------

def test_an_id_never_seen_registered_is_unknown():
    labels = EndpointLabels(limit=10)
    assert [labels.label(f"made-up-{n}") for n in range(20)] == [UNKNOWN] * 20
    assert labels.label("gone", registered=False) == UNKNOWN
    assert labels.labelled() == frozenset()


def test_registered_endpoints_get_their_own_label_up_to_the_cap_then_other():
    labels = EndpointLabels(limit=2)
    assert [labels.label(e, registered=True) for e in ("a", "b", "c", "a", "d")] == [
        "a", "b", OTHER, "a", OTHER]
    assert labels.label("b") == "b"  # labelled already: no need to say it is registered
    assert labels.labelled() == {"a", "b"}
    assert EndpointLabels(limit=0).label("a", registered=True) == OTHER


def test_the_registered_set_decides_when_the_caller_cannot_tell():
    labels = EndpointLabels(limit=5)
    labels.retain({"known"})
    assert labels.label("known") == "known"
    assert labels.label("stranger") == UNKNOWN


def test_a_removed_endpoint_loses_its_series_and_frees_its_slot():
    labels = EndpointLabels(limit=1)
    label = labels.label("obs-removed", registered=True)
    metrics.RESPONSES.labels(label, "2xx").inc()
    metrics.DELIVERIES.labels(label, "delivered", "").inc()
    assert series("obs-removed")
    assert labels.retain({"someone-else"}) == ["obs-removed"]
    assert series("obs-removed") == []
    assert labels.label("obs-next", registered=True) == "obs-next"  # the slot is free again


def test_an_endpoint_the_gate_found_missing_is_forgotten_at_once():
    labels = EndpointLabels(limit=5)
    metrics.RETRIES.labels(labels.label("obs-missing", registered=True)).inc()
    assert labels.label("obs-missing", registered=False) == UNKNOWN
    assert series("obs-missing") == [] and labels.labelled() == frozenset()


def test_deliveries_count_final_outcomes_only():
    with pytest.raises(ValueError, match="retry_scheduled"):
        metrics.count_outcome("ep", "retry_scheduled")
    with pytest.raises(ValueError, match="duplicate"):
        metrics.count_outcome("ep", "duplicate")


# -- redaction ------------------------------------------------------------------------------

URL = "http://127.0.0.1:8080/in/t0k3nABC123?sig=s3cr3t&plain=1"


def test_scrub_masks_the_known_urls_secrets_wherever_they_appear():
    echoed = "404: no route for /in/t0k3nABC123 (sig s3cr3t); see " + URL
    shown = redact.scrub(echoed, URL)
    assert "t0k3nABC123" not in shown and "s3cr3t" not in shown
    assert "/in/" in shown and "127.0.0.1:8080" in shown
    assert redact.scrub("connect_timeout", URL) == "connect_timeout"
    assert redact.scrub("", URL) == ""


def test_scrub_masks_userinfo_and_percent_encoded_tokens():
    url = "https://bob:hunter22@hooks.example.com/h/abc%2Fdef9?t=x%20yz1"
    assert redact.secrets_of(url)[:1] == ["bob:hunter22"]
    shown = redact.scrub("bob:hunter22 hunter22 abc/def9 x yz1 abc%2Fdef9", url)
    for secret in ("hunter22", "abc/def9", "x yz1", "abc%2Fdef9"):
        assert secret not in shown


# -- log lines ------------------------------------------------------------------------------

@pytest.fixture
def captured() -> tuple[logging.Logger, io.StringIO]:
    """A logger of the test's own with one handler, set up as a Hookline worker's are."""
    stream = io.StringIO()
    logger = logging.getLogger("tests.observability")
    logger.handlers = [logging.StreamHandler(stream)]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    configure_worker_logging(logger, json_lines=True)
    yield logger, stream
    logger.handlers = []


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_for_an_exception_carries_its_traceback_redacted(captured):
    logger, stream = captured
    try:
        raise ConnectionError(f"could not reach {URL}")
    except ConnectionError:
        logger.exception("task failed for %s", URL)
    [line] = lines(stream)
    assert line["level"] == "error" and line["logger"] == "tests.observability"
    assert "Traceback (most recent call last)" in line["traceback"]
    assert "ConnectionError: could not reach http://127.0.0.1:8080/in/***?***" in line[
        "traceback"]
    assert "t0k3n" not in stream.getvalue() and "s3cr3t" not in stream.getvalue()
    assert line["message"] == "task failed for http://127.0.0.1:8080/in/***?***"


def test_other_extras_of_a_record_stay_out_of_the_json_line(captured):
    logger, stream = captured
    # Celery's task failure lines carry the task's arguments in ``extra={"data": ...}``.
    logger.error("Task %(name)s failed", {"name": "hookline.deliver"},
                 extra={"data": {"args": "['ep', {'card': '4111'}]"}})
    [line] = lines(stream)
    assert line["message"] == "Task hookline.deliver failed"
    assert "4111" not in stream.getvalue()


def test_urllib3_debug_lines_lose_the_request_target(captured):
    logger, stream = captured
    logger.debug('%s://%s:%s "%s %s %s" %s %s', "http", "127.0.0.1", 8080, "POST",
                 "/in/t0k3nABC123?sig=s3cr3t", "HTTP/1.1", 200, 2)
    [line] = lines(stream)
    assert line["message"] == 'http://127.0.0.1:8080 "POST /in/***?*** HTTP/1.1" 200 2'


def test_text_lines_carry_the_traceback_redacted_too():
    stream = io.StringIO()
    logger = logging.getLogger("tests.observability.text")
    logger.handlers = [logging.StreamHandler(stream)]
    logger.propagate = False
    configure_worker_logging(logger, json_lines=False)
    try:
        raise ValueError(f"bad target {URL}")
    except ValueError:
        logger.exception("failed")
    logger.handlers = []
    assert "Traceback" in stream.getvalue() and "t0k3n" not in stream.getvalue()


def test_log_event_fields_are_redacted(caplog):
    with caplog.at_level(logging.INFO, logger="hookline"):
        log_event("delivery.rejected", endpoint_id="ep", error=f"refused: {URL}")
    [record] = caplog.records
    assert "t0k3n" not in record.getMessage()
    assert "s3cr3t" not in record.hookline["error"]  # type: ignore[attr-defined]


def test_the_json_formatter_is_the_librarys():
    from pythonjsonlogger.json import JsonFormatter as Library

    assert issubclass(JsonFormatter, Library)
