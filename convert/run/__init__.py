"""Running a plan: the driver, its runners (a dask cluster with supervision of the futures, or this process for a
small delivery), and the tasks of each kind of job.

Every task ends through one task boundary (`boundary.py`): a failure is the item's row, never the run's end.
"""
