"""`python -m labzarr` is the `labzarr` command."""

import sys

from labzarr.convert.cli import main

sys.exit(main())
