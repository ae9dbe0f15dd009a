"""Imported by the worker server (`worker_start.PRELOAD`): numcodecs' blosc lock made there, once, before any
worker is forked.

numcodecs makes that lock (`numcodecs.blosc.get_mutex`, a `multiprocessing.Lock`) at a process's first compression,
whether it then uses it or not. In a worker the forkserver started, that is a named semaphore registered with
multiprocessing's resource tracker, and a worker killed by a signal (a decoder's segfault) never unregisters it:
the tracker, which the `labzarr` command's processes share, then printed "There appear to be N leaked semaphore
objects to clean up at shutdown" on the console after the command had ended, `--quiet` or not. Made here, in the
server, the lock is of the server's own start method (fork: an unnamed semaphore, not tracked), and every worker
inherits it. numcodecs uses it only around blosc's global context, which it never uses in a process other than the
one that imported it (`numcodecs.blosc._get_use_threads`): a worker's compressions share nothing through it.
"""

from __future__ import annotations

import numcodecs.blosc

numcodecs.blosc.get_mutex()
