"""exit_now: what a normal exit does that the job needs (non-daemon threads finish, exit handlers run,
buffered output reaches the file), without the interpreter's module teardown."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_threads_exit_handlers_and_buffered_output_all_happen_before_the_exit_code(tmp_path):
    script = textwrap.dedent(f"""
        import atexit, pathlib, sys, threading, time
        from launchpad.fast_exit import exit_now

        out = pathlib.Path({str(tmp_path)!r})
        def late_writer():
            time.sleep(0.3)
            (out / "thread").write_text("done")
        threading.Thread(target=late_writer).start()  # non-daemon: the exit waits for it
        atexit.register(lambda: (out / "atexit").write_text((out / "thread").read_text()))
        sys.stdout.write("buffered, no newline")
        exit_now(3)
        print("never")
    """)
    log = tmp_path / "log"
    with open(log, "w") as f:  # a file, not a pipe: block-buffered, as train.log is
        proc = subprocess.run([sys.executable, "-c", script], stdout=f, stderr=subprocess.STDOUT, timeout=60)
    assert proc.returncode == 3
    assert (tmp_path / "atexit").read_text() == "done"  # handlers ran after the thread had finished
    assert log.read_text() == "buffered, no newline"
