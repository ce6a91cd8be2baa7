import signal
import sys

from inferstack.cli import main

# Piping into `head` closes stdout early; exit quietly as Unix tools do, not with a traceback.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
sys.exit(main())
