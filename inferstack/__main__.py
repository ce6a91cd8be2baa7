import sys

from inferstack.cli import main

sys.exit(main())
