"""The `labzarr` command (`python -m labzarr` too).

Ctrl-C is answered here, outside every import: the CLI imports numpy, zarr and openpyxl before it parses
its arguments, and a Ctrl-C then would otherwise print an import traceback.

A command that returns ends the process at once (`os._exit`, after flushing the output and the log), as mypy's
`hard_exit` does: a normal exit would first free every object of the modules a conversion imported (dask, zarr,
pydicom, nibabel), which costs a small delivery much of its time (docs/benchmarks.md, "Fixed cost"). Everything the
command wrote is closed by then; the worker processes it started have been stopped, and its worker server and
multiprocessing's resource tracker end on their own when this process's end closes their pipes.
"""

import logging
import os
import sys

INTERRUPTED = "labzarr: interrupted; rerun the same command to resume"


def main() -> int:
    """Run the CLI; a Ctrl-C anywhere is one line on stderr and exit code 130 (128 + SIGINT).

    `labzarr convert` starts again with the hash seed of its workers once it knows it will start a cluster, before
    it imports numpy (`labzarr.convert.run.hash_seed`, `labzarr.convert.cli`)."""
    try:
        from labzarr.convert.cli import main as cli

        code = cli(restartable=True)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
