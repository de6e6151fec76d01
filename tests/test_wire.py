"""The wire: what a worker's reply may be, and every way a hostile one is refused before it costs anything."""

from __future__ import annotations

import json
import os
import struct
import threading
import time

import numpy as np
import pytest

from labrunner.labs.definition import Launch
from labrunner.run import replies
from labrunner.run.wire import (
    HEADER_LIMIT,
    SKIP_LIMIT,
    BufferSpec,
    Expected,
    Reader,
    WireClosed,
    WireError,
    WireTimeout,
    encode,
    write_message,
)

COOKIE = bytes(range(16))
CASE = Expected(exact={"outputs/out": BufferSpec("float32", (4,)), "inputs_after/q": BufferSpec("float32", (2, 2))})


def deliver(
    parts: list, expected: Expected = CASE, cookie: bytes = COOKIE, records: bool = False, timeout_s: float = 5
):
    """Write raw parts into a pipe from a thread and read one message from it."""
    read_end, write_end = os.pipe()

    def writer():
        try:
            for part in parts:
                os.write(write_end, bytes(part) if not isinstance(part, np.ndarray) else part.tobytes())
        except BrokenPipeError:
            pass
        finally:
            os.close(write_end)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        return Reader(read_end, cookie).read(expected, time.monotonic() + timeout_s, records)
    finally:
        os.close(read_end)
        thread.join()


def raw(header: dict, cookie: bytes = COOKIE) -> bytes:
    text = json.dumps(header).encode()
    return cookie + struct.pack(">I", len(text)) + text


def case_reply() -> dict:
    return {
        "ok": True,
        "outputs": {"out": np.arange(4, dtype=np.float32)},
        "inputs_after": {"q": np.ones((2, 2), dtype=np.float32)},
    }


def test_a_reply_travels_as_a_json_header_and_raw_buffers():
    got = deliver(encode(case_reply(), COOKIE))
    assert got["ok"] is True
    np.testing.assert_array_equal(got["outputs"]["out"], np.arange(4, dtype=np.float32))
    assert got["inputs_after"]["q"].dtype == np.float32 and got["inputs_after"]["q"].shape == (2, 2)


def test_junk_before_the_cookie_is_skipped_and_counted():
    junk = b'\x00\x00\x00\x21{"body":{"ok":true},"buffers":[]}'  # a forged reply without the cookie
    read_end, write_end = os.pipe()
    write_message(write_end, [junk, *encode(case_reply(), COOKIE)])
    os.close(write_end)
    reader = Reader(read_end, COOKIE)
    got = reader.read(CASE, time.monotonic() + 5)
    os.close(read_end)
    assert reader.skipped == len(junk) == 37
    np.testing.assert_array_equal(got["outputs"]["out"], np.arange(4, dtype=np.float32))


def test_a_channel_of_nothing_but_junk_is_refused_after_the_skip_limit():
    with pytest.raises(WireError, match=r"bytes arrived that were not a reply"):
        deliver([b"x" * (SKIP_LIMIT + 65536)])


@pytest.mark.parametrize("dtype", ["object", "float16", "complex64", "<f4"])
def test_a_dtype_outside_the_allow_list_is_refused(dtype):
    header = {
        "body": {"ok": True, "outputs": {"out": {"$buffer": "outputs/out"}}},
        "buffers": [{"name": "outputs/out", "dtype": dtype, "shape": [4]}],
    }
    with pytest.raises(WireError, match=r"buffer 'outputs/out': dtype .* is not one of float32, float64"):
        deliver([raw(header)])


def test_a_buffer_of_the_wrong_shape_is_refused_before_its_bytes_are_read():
    header = {
        "body": {"ok": True, "outputs": {"out": {"$buffer": "outputs/out"}}},
        "buffers": [
            {"name": "outputs/out", "dtype": "float32", "shape": [1 << 38]},
            {"name": "inputs_after/q", "dtype": "float32", "shape": [2, 2]},
        ],
    }
    with pytest.raises(WireError, match=r"buffer 'outputs/out' is float32\[274877906944\], expected float32\[4\]"):
        deliver([raw(header)])  # no bytes follow: the refusal comes from the header alone


def test_a_buffer_not_asked_for_is_refused():
    body = {**case_reply(), "extra": np.zeros(3, dtype=np.int64)}
    with pytest.raises(WireError, match=r"buffer 'extra' was not asked for"):
        deliver(encode(body, COOKIE))


def test_a_success_missing_one_of_its_buffers_is_refused():
    body = {"ok": True, "outputs": {"out": np.arange(4, dtype=np.float32)}}
    with pytest.raises(WireError, match=r"buffer 'inputs_after/q' is missing from the reply"):
        deliver(encode(body, COOKIE))


def test_a_case_reply_may_leave_out_an_input_it_found_unchanged_but_not_an_output():
    inputs = {"q": np.ones((2, 2), dtype=np.float32)}
    expected = replies.case_reply(inputs, {"out": 4}, ["out"])
    bands = {"out": [np.zeros(replies.GUARD_ELEMENTS, np.float32)] * 2}
    unchanged = {"ok": True, "outputs": {"out": np.arange(4, dtype=np.float32)}, "bands": bands, "inputs_after": {}}
    assert deliver(encode(unchanged, COOKIE), expected)["inputs_after"] == {}
    no_output = {"ok": True, "outputs": {}, "bands": bands, "inputs_after": inputs}
    with pytest.raises(WireError, match=r"buffer 'outputs/out' is missing from the reply"):
        deliver(encode(no_output, COOKIE), expected)


def test_a_placeholder_that_is_not_its_own_place_is_refused():
    header = {
        "body": {
            "ok": True,
            "outputs": {"out": {"$buffer": "inputs_after/q"}},
            "inputs_after": {"q": {"$buffer": "outputs/out"}},
        },
        "buffers": [
            {"name": "outputs/out", "dtype": "float32", "shape": [4]},
            {"name": "inputs_after/q", "dtype": "float32", "shape": [2, 2]},
        ],
    }
    with pytest.raises(WireError, match=r"outputs/out: a buffer placeholder that is not this place's own"):
        deliver([raw(header), np.zeros(4, np.float32), np.zeros(4, np.float32)])


def test_a_header_longer_than_the_limit_is_refused_unread():
    with pytest.raises(WireError, match=rf"a header of {HEADER_LIMIT + 1} bytes was announced"):
        deliver([COOKIE + struct.pack(">I", HEADER_LIMIT + 1)])


def test_a_header_that_is_not_json_is_refused():
    with pytest.raises(WireError, match=r"the header is not JSON"):
        deliver([COOKIE + struct.pack(">I", 9) + b"cos\nsystem"])


def test_a_header_nested_past_the_parsers_depth_is_refused_not_raised():
    text = b"[" * 200_000
    with pytest.raises(WireError, match=r"^the header is not JSON \(nested too deep\)$"):
        deliver([COOKIE + struct.pack(">I", len(text)) + text])


def test_a_key_given_twice_is_refused():
    text = b'{"body":{"ok":true,"ok":false},"buffers":[]}'
    with pytest.raises(WireError, match=r"the header is not JSON \(a key appears twice\)"):
        deliver([COOKIE + struct.pack(">I", len(text)) + text], Expected(exact={}))


def test_a_launch_record_is_rebuilt_only_where_records_are_allowed():
    launch = Launch("flash_prefill", (2, 32, 1), (128, 1, 1), 0, ("q", "k", "v", "out", 17, 31))
    message = encode({"launches": [launch]})
    assert deliver(message, Expected(exact={}), cookie=b"", records=True)["launches"] == [launch]
    with pytest.raises(WireError, match=r"launches/0: a key that no message has"):
        deliver(message, Expected(exact={}), cookie=b"")


def test_silence_ends_at_the_deadline():
    read_end, write_end = os.pipe()
    started = time.monotonic()
    with pytest.raises(WireTimeout, match=r"no progress waiting for a reply before the deadline"):
        Reader(read_end, COOKIE).read(CASE, started + 0.3)
    assert time.monotonic() - started < 2.0
    os.close(read_end)
    os.close(write_end)


def test_a_channel_closed_mid_message_is_said():
    parts = encode(case_reply(), COOKIE)
    with pytest.raises(WireClosed, match=r"the channel closed in the middle of a message"):
        deliver([parts[0], parts[1].tobytes()[:8]])


def test_long_text_in_a_reply_is_cut():
    got = deliver(encode({"ok": False, "kind": "error", "detail": "x" * 100_000}, COOKIE), Expected(exact={}))
    assert got["detail"] == "x" * 65536 + " ... (34464 more characters not shown)"


def checked(sets, out_count, value=0.0):
    return {"sets": np.asarray(sets, np.int64), "outputs": np.full((len(sets), out_count), value, np.float32)}


def test_a_timing_reply_takes_only_outputs_the_request_sized():
    expected = replies.timing_reply({"kind": "speedup", "out_count": 8})
    ok = {"checked": {"student": checked([0, 3], 8, 1.5), "baseline": checked([0, 3], 8)}, "sets_drawn": 5}
    got = deliver(encode(ok, COOKIE), expected)
    assert got["checked"]["student"]["outputs"].shape == (2, 8) and list(got["checked"]["student"]["sets"]) == [0, 3]
    wrong_size = {"checked": {"student": checked([0], 9)}}
    with pytest.raises(
        WireError, match=r"buffer 'checked/student/outputs' \(float32\[1, 9\]\) is not one this request asks for"
    ):
        deliver(encode(wrong_size, COOKIE), expected)
    wrong_sets = {"checked": {"student": {"sets": np.zeros(1, np.float32), "outputs": np.zeros((1, 8), np.float32)}}}
    with pytest.raises(
        WireError, match=r"buffer 'checked/student/sets' \(float32\[1\]\) is not one this request asks for"
    ):
        deliver(encode(wrong_sets, COOKIE), expected)


def test_a_pipeline_timing_reply_takes_each_size_s_own_outputs():
    request = {"kind": "pipeline", "sizes": [{"T": 2, "out_count": 4096}, {"T": 3, "out_count": 6144}]}
    reply = {
        "overhead": {"median_ms": 0.003, "rse": None},
        "l2_flush_bytes": 1 << 27,
        "persisting_l2_reset": True,
        "sizes": [
            {"T": 2, "stats": {"total": {"median_ms": 0.1}}, "checked": checked([0], 4096, 0.5), "sets_drawn": 3},
            {"T": 3, "stats": {"total": {"median_ms": 0.2}}, "checked": checked([1], 6144, 0.25), "sets_drawn": 3},
        ],
        "state_before": {"sm_clock_mhz": 1980, "name": "NVIDIA H200"},
        "state_after": {"sm_clock_mhz": None},
    }
    got = deliver(encode(reply, COOKIE), replies.timing_reply(request))
    size = got["sizes"][1]["checked"]
    assert (list(size["sets"]), size["outputs"].shape, float(size["outputs"][0, 0])) == ([1], (1, 6144), 0.25)
    assert got["state_before"] == {"sm_clock_mhz": 1980, "name": "NVIDIA H200"} and got["overhead"]["rse"] is None


def fake_worker_reply(reply: dict, expected: Expected, timeout_s: float = 5.0):
    """The driver's side of one exchange, against a stand-in worker that sends `reply` (with the cookie)."""
    from labrunner.run.wire import ANY_BUFFERS, Channel
    from labrunner.run.worker import Worker

    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    worker = Worker("cpu")
    worker._channel = Channel(request_write, reply_read, COOKIE)

    def stand_in():
        try:
            Reader(request_read).read(ANY_BUFFERS, None, records=True)
            write_message(reply_write, encode(reply, COOKIE))
        except WireClosed:
            pass  # the driver refused the header and hung up before the buffers: as it should
        finally:
            os.close(reply_write)
            os.close(request_read)

    thread = threading.Thread(target=stand_in)
    thread.start()
    try:
        return worker._exchange({"op": "run", "inputs": {"q": np.ones((2, 2), np.float32)}}, timeout_s, expected)
    finally:
        thread.join()


def test_a_worker_reply_with_a_buffer_of_another_shape_is_a_crash_that_names_it():
    from labrunner.run.worker import WorkerFailure

    forged = {
        "ok": True,
        "outputs": {"out": np.zeros(3, np.float32)},
        "inputs_after": {"q": np.ones((2, 2), np.float32)},
    }
    with pytest.raises(
        WorkerFailure,
        match=r"crash: the worker's reply was refused: buffer 'outputs/out' is "
        r"float32\[3\], expected float32\[4\]",
    ) as raised:
        fake_worker_reply(forged, CASE)
    assert raised.value.status == "crash"


def test_a_worker_success_without_its_buffers_is_a_crash():
    from labrunner.run.worker import WorkerFailure

    with pytest.raises(WorkerFailure, match=r"crash: the worker's reply was refused: a success without its buffers"):
        fake_worker_reply({"ok": True, "verdict": "pass"}, CASE)


def test_a_worker_failure_of_an_unknown_kind_is_a_crash_and_a_known_one_is_shown_escaped():
    from labrunner.run.worker import WorkerFailure

    with pytest.raises(WorkerFailure, match=r"crash: the worker's reply was refused: a failure without a known kind"):
        fake_worker_reply({"ok": False, "kind": "pass", "detail": "all good"}, CASE)
    with pytest.raises(WorkerFailure, match=r"^fault: barrier \\x1b\[32m never completes$"):
        fake_worker_reply({"ok": False, "kind": "fault", "detail": "barrier \x1b[32m never completes"}, CASE)


def test_a_dead_writer_is_seen_even_while_something_holds_its_pipe_open():
    read_end, write_end = os.pipe()  # the write end stays open, as a child of a dead worker would keep it
    started = time.monotonic()
    with pytest.raises(WireClosed, match=r"the process ended without closing the channel"):
        Reader(read_end, COOKIE, alive=lambda: False).read(CASE, started + 30)
    assert time.monotonic() - started < 5.0
    os.close(read_end)
    os.close(write_end)
