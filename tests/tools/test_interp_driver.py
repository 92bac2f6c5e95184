# SPDX-License-Identifier: Apache-2.0
# test_interp_driver.py - the interpreter driver's output buffering (src/interp/driver.py),
# run on the host: one print() is one stdout event even when the flusher wakes between
# its text and its newline; a line left unfinished still goes out.
import os
import threading
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(TOP, "src", "interp", "driver.py")


def driver_module():
    """driver.py's definitions without its last line (it runs main at import)."""
    with open(SRC) as f:
        text = f.read()
    body, _, _ = text.rpartition("sys.exit(main(")
    ns = {"__name__": "k8driver"}
    exec(compile(body, SRC, "exec"), ns)
    return ns


class Sent:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def send(self, ev):
        with self.lock:
            self.events.append(ev)


def test_a_print_is_one_event_and_a_partial_line_still_goes():
    m = driver_module()
    drv = m["Driver"](None, "t")
    drv.conn = Sent()
    threading.Thread(target=drv.flusher, daemon=True).start()
    # the flusher wakes (every FLUSH_S) between the text and its newline
    drv.emit("stdout", "second")
    time.sleep(3 * m["FLUSH_S"])
    drv.emit("stdout", "\n")
    time.sleep(m.get("PARTIAL_S", 0.25) + 0.2)
    assert drv.conn.events == [{"type": "stdout", "text": "second\n"}]
    # a line that stays unfinished (a progress bar) is sent as it is
    drv.emit("stdout", "50%")
    time.sleep(m.get("PARTIAL_S", 0.25) + 0.3)
    assert drv.conn.events[1:] == [{"type": "stdout", "text": "50%"}]
