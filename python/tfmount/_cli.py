"""The ``tfmount`` command of the wheel: the same command line as the binary, run in this
process. Signals get their default actions first (Python's SIGINT handler would only raise
KeyboardInterrupt once control came back to Python, which it never does: the command ends the
process itself)."""

import signal
import sys


def main():
    from tfmount import _tfmount

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    _tfmount.main(["tfmount"] + sys.argv[1:])
