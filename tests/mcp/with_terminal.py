"""Runs a command with a pseudo-terminal as its controlling terminal, and
plays the person at that terminal (host/tests/mcp_http.rs).

    python with_terminal.py ANSWERS LOG -- COMMAND ARGS...

COMMAND keeps this process's stdin, stdout and stderr; only its /dev/tty is
the pseudo-terminal. Each time the terminal shows `allow? [y/N]`, the next
of ANSWERS (a JSON array of strings, each typed as it is, e.g. "y\\n") is
typed; what the terminal showed is appended to LOG as it comes. Exits with
COMMAND's status once it ends (SIGTERM is passed on).
"""

import ctypes
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import termios


def main(argv):
    split = argv.index("--")
    answers = json.loads(argv[0])
    log = open(argv[1], "ab", buffering=0)
    master, slave = os.openpty()

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        # Killed with this process, whatever kills it (PR_SET_PDEATHSIG).
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)

    proc = subprocess.Popen(argv[split + 1:], preexec_fn=controlling_terminal, pass_fds=(slave,))
    os.close(slave)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    shown = b""
    while proc.poll() is None:
        ready, _, _ = select.select([master], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        log.write(chunk)
        shown += chunk
        while b"allow? [y/N]" in shown:
            shown = shown.split(b"allow? [y/N]", 1)[1]
            if answers:
                os.write(master, answers.pop(0).encode())
    sys.exit(proc.wait())


if __name__ == "__main__":
    main(sys.argv[1:])
