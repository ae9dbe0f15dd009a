"""Running a plan on dask: the driver, supervision of the futures, and the worker tasks of each kind of job.

Every task ends through one task boundary (`boundary.py`): a failure is the item's row, never the run's end.
"""
