"""app/tracebacks.py: billiard's exception info with code positions read lazily still formats,
pickles and walks like billiard's own."""

from __future__ import annotations

import pickle
import traceback

from billiard import einfo

from app import tracebacks


def failing() -> None:
    raise ValueError("boom")


def test_lazy_code_positions_are_read_only_when_asked_and_survive_pickling(monkeypatch):
    monkeypatch.setattr(einfo._Frame, "Code", tracebacks.LazyCode)
    try:
        failing()
    except ValueError:
        info = einfo.ExceptionInfo()
    frames = []
    tb = info.tb
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    assert frames and all(isinstance(code, tracebacks.LazyCode) for code in frames)
    assert all("_co_positions" not in code.__dict__ for code in frames)  # nothing listed yet
    assert "ValueError: boom" in info.traceback and "failing" in info.traceback

    # Formatting the copied traceback reads the positions (and gets billiard's answer).
    text = "".join(traceback.format_tb(info.tb))
    assert "raise ValueError" in text
    code = frames[-1]
    assert list(code.co_positions()) == list(failing.__code__.co_positions())

    # Pickled (prefork sends it to the parent) as billiard's own copy, positions included.
    copy = pickle.loads(pickle.dumps(info.tb))
    assert type(copy.tb_frame.f_code.__dict__) is dict
    assert "_code" not in pickle.loads(pickle.dumps(code)).__dict__
    assert list(pickle.loads(pickle.dumps(code)).co_positions()) == list(code.co_positions())
