"""The `labzarr` command (`python -m labzarr` too).

Ctrl-C is answered here, outside every import: the CLI imports numpy, zarr and openpyxl before it parses
its arguments, and a Ctrl-C then would otherwise print an import traceback.
"""

import sys

INTERRUPTED = "labzarr: interrupted; rerun the same command to resume"


def main() -> int:
    """Run the CLI; a Ctrl-C anywhere is one line on stderr and exit code 130 (128 + SIGINT)."""
    try:
        from labzarr.convert.cli import main as cli

        return cli()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
