"""The job side after an acknowledgement: wait for Rota's SIGTERM and leave with 143, even
when the SIGTERM comes while the acknowledgement is still being answered (issue 19: the
stop arrived 70-240 ms after the ack and killed a script that had no handler, exit -15).

Each case runs in a child process, so the signal handler never lands in the test runner."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, signal, sys, threading
    from rota import sdk

    run = sdk.Run(sdk.RunInfo(run_id="r", job_id="j", run_token="t", nats_url="nats://x",
                              control_subject="c", ack_subject="a"))
    acked = []

    def acknowledge(uri, timeout=30.0, *, progress_s=None):
        acked.append(uri)
        if "{when}" == "during":   # the stop overtakes the ack's answer
            os.kill(os.getpid(), signal.SIGTERM)
        elif "{when}" == "after":
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()

    run.acknowledge = acknowledge
    code = run.acknowledge_and_wait("file:///ckpt/1", stop_wait_s={wait})
    print(acked, code, flush=True)
    sys.exit(code)
""")


def child(when: str, wait: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD.format(when=when, wait=wait)],
                          capture_output=True, text=True, timeout=60)


def test_the_stop_after_the_ack_ends_the_process_with_143() -> None:
    done = child("after")
    assert done.returncode == 143, done.stderr
    assert done.stdout.strip() == "['file:///ckpt/1'] 143"


def test_a_stop_that_overtakes_the_acks_answer_is_still_handled() -> None:
    done = child("during")
    assert done.returncode == 143, done.stderr  # not -15: the handler was in before the ack


def test_without_a_stop_it_leaves_by_itself_with_0_after_the_bound() -> None:
    done = child("never", wait=0.2)
    assert done.returncode == 0, done.stderr
