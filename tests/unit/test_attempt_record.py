"""An attempt record's JSON (the history's line format) holds every field and reads back."""

from __future__ import annotations

import json
from dataclasses import fields

from hookline.store.history import AttemptRecord


def test_the_json_holds_every_field_and_reads_back():
    record = AttemptRecord(attempt=2, at=1796143019.4797234, outcome="failed", status=503,
                           latency=0.123456, error="HTTP 503", response="busy \u2603")
    data = json.loads(record.to_json())
    assert set(data) == {field.name for field in fields(AttemptRecord)}
    assert data["at"] == 1796143019.48 and data["latency"] == 0.1235
    assert AttemptRecord.from_json(record.to_json()) == AttemptRecord(
        attempt=2, at=1796143019.48, outcome="failed", status=503, latency=0.1235,
        error="HTTP 503", response="busy \u2603")
