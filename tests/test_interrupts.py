"""A Ctrl-C or SIGTERM that lands in a garbage-collector callback is delivered again, quietly (workbench.interrupts)."""

import subprocess
import sys

SCRIPT = """
import os, signal, time, weakref
from workbench import interrupts
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal gives it (pytest-xdist's workers ignore it)
{setup}
class Held: pass
def cleanup(ref):  # as SQLAlchemy's registry does while Optuna's storage is collected
    {inside}
held = Held()
ref = weakref.ref(held, cleanup)
try:
    del held
    for _ in range(500): time.sleep(0.01)  # the program goes on: the interrupt must reach it
    print("lost")
except KeyboardInterrupt:
    print("delivered")
"""


def run(setup: str, inside: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(setup=setup, inside=inside)], capture_output=True, text=True, timeout=60
    )


def test_without_the_hook_python_swallows_the_interrupt_and_prints_a_traceback():
    done = run("", "raise KeyboardInterrupt")
    assert done.stdout.strip() == "lost"
    assert "Traceback" in done.stderr


def test_a_swallowed_keyboard_interrupt_is_delivered_again_without_a_traceback():
    done = run("interrupts.install()", "raise KeyboardInterrupt")
    assert done.stdout.strip() == "delivered", done.stderr
    assert done.stderr == ""


def test_a_sigterm_made_an_interrupt_is_delivered_again_when_it_lands_in_a_callback():
    done = run(
        "interrupts.interrupt_on(signal.SIGTERM)",
        "os.kill(os.getpid(), signal.SIGTERM)\n    for _ in range(1000): pass",
    )
    assert done.stdout.strip() == "delivered", done.stderr
    assert done.stderr == ""


def test_other_exceptions_in_callbacks_are_still_reported():
    done = run("interrupts.install()", "raise ValueError('a real bug')")
    assert done.stdout.strip() == "lost"
    assert "ValueError: a real bug" in done.stderr


def test_sigusr1_writes_every_threads_stack_to_stderr_and_the_program_goes_on():
    script = """
import os, signal, threading, time
from workbench import interrupts
assert interrupts.dump_stacks_on(signal.SIGUSR1)
def waiting_in_a_thread(): time.sleep(5)
threading.Thread(target=waiting_in_a_thread, daemon=True).start()
def main_loop():
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.2)
    print("went on")
main_loop()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "went on"
    assert "main_loop" in done.stderr and "waiting_in_a_thread" in done.stderr


ENDING = """
import os, signal, sys
from workbench import interrupts
signal.signal(signal.SIGINT, signal.default_int_handler)
interrupts.interrupt_on(signal.SIGTERM)
try:
    raise KeyboardInterrupt  # the first: handled, the process ends with 130
except KeyboardInterrupt:
    {ending}
    os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C, and a SIGTERM, while it ends
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000): pass
    sys.exit(130)
"""


def test_a_process_ending_on_a_handled_interrupt_exits_130_whatever_signal_comes_after():
    def run_ending(ending: str) -> int:
        script = ENDING.format(ending=ending)
        return subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60).returncode

    assert run_ending("pass") == -2  # without: the second interrupt escapes, and Python ends itself by SIGINT
    assert run_ending("interrupts.ending()") == 130
