"""Progress of long loops: log lines (not a bar per refresh) when stderr is no terminal."""

from __future__ import annotations

import logging

from tasks.core.progress import LogProgress, progress


def test_without_a_terminal_progress_is_a_log_line_every_interval(monkeypatch, caplog):
    monkeypatch.setenv("PRIVHAR_PROGRESS_SECONDS", "0")
    bar = progress(4, "private training")  # pytest captures stderr: no terminal
    assert isinstance(bar, LogProgress)
    with caplog.at_level(logging.INFO, logger="tasks.core.progress"):
        bar.update(1)
        bar.set_postfix(loss="0.500")
        bar.update(3)
        bar.close()
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("private training: 1/4 steps (")
    assert lines[1].startswith("private training: 4/4 steps (") and lines[1].endswith("loss=0.500)")


def test_lines_are_rate_limited(monkeypatch, caplog):
    monkeypatch.setenv("PRIVHAR_PROGRESS_SECONDS", "3600")
    bar = progress(1000, "decode", "video")
    with caplog.at_level(logging.INFO, logger="tasks.core.progress"):
        for _ in range(1000):
            bar.update(1)
        bar.close()
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "decode: 1000/1000 videos"
    ]
    assert LogProgress(1, "train", "batch", 0).line().startswith("train: 0/1 batches")
