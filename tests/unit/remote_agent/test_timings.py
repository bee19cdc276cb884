"""Timings: phases counted where the time goes, and the time suspended in a yield as send_s."""

from __future__ import annotations

import time

from remote_agent.timings import PHASES, Timings


def test_phases_count_their_blocks_and_the_items_they_wait_for():
    timings = Timings()
    with timings.phase("hash_s"):
        time.sleep(0.02)

    def slow():
        for i in range(2):
            time.sleep(0.01)
            yield i

    assert list(timings.timed("read_s", slow())) == [0, 1]
    got = timings.to_json()
    assert list(got) == list(PHASES)
    assert got["hash_s"] >= 0.02 and got["read_s"] >= 0.02
    assert got["convert_s"] == got["send_s"] == got["lookup_s"] == 0.0


def test_send_is_the_time_a_frame_waited_to_be_taken():
    timings = Timings()
    frames = timings.sending(iter([b"a", b"b"]))
    assert next(frames) == b"a"
    time.sleep(0.03)  # the HTTP layer sending frame a
    assert next(frames) == b"b"
    assert timings.seconds["send_s"] >= 0.03
