"""The plan, pure: what each discovered file becomes and which task writes what, decided from probes alone.

Plain data in, plain data out (`plan.build.plan`): printable, testable, and free of I/O. Nothing here
imports zarr, dask or fsspec (`tests/convert/test_stages.py` holds that).
"""
