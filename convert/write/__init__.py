"""Writing a store: arrays staged and installed whole, the lock, the bookkeeping folder, recorded outcomes.

Everything here writes through the store layer's locations (`labzarr.store.Folder`, `UrlStore`).

Object stores (`s3://bucket/prefix/x.zarr`): the commit protocol.

A filesystem store commits an array by renaming a staged folder into place
(`arrays.py`, through `labzarr.store.Folder`). Object stores have no rename, hard
link, fsync or flock, so a URL store commits differently; `labzarr.store.UrlStore`
carries out its half of each step, and this docstring is the protocol:

1. A volume (or a sample's role) is written directly at its final path, after
   every key of an older version under that path is deleted. Until step 3 the
   array has no `complete` attr, so neither resume nor `verify` trusts it.
2. Once written, every chunk (shard) object is checked present by listing the
   array's prefix (every chunk is written, also all-fill ones, as on disk).
3. `content_sha256`, then `complete` are set (one PUT of `zarr.json` each, an
   atomic replace on S3): the array is whole. A task of a dead run never gets
   here (the lock object no longer names its run).
4. A stack of 2D images is staged under `.labzarr/staging/` (shards carried
   from the installed stack are copied server-side instead of hard-linked), and
   installed by deleting the old version, copying every key but `zarr.json`
   server-side, checking every shard present at the final path, and copying the
   staged `zarr.json` (with `complete`) last.
5. The root's index is written last, once the run's rows are final: a reader
   that goes through the index and checks `complete` sees only whole arrays of
   a finished run.

What is weaker than on a filesystem: while a rerun replaces an array, that
array is missing or partial (a filesystem swaps it in one rename), so a store
should not be read while it is being converted. The lock is an object created
with a conditional PUT (`If-None-Match: *`), which S3 and moto honour: a second
run is refused at once. Nothing drops it when its holder dies, so a lock left
by a dead run on this host is taken over (the pid is checked), but one left by
a run on another host must be deleted by hand (the error names the object).
Sweeping leftovers (staged stacks) works by listing `.labzarr/staging/`.
"""
