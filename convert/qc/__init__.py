"""Reviewing a converted store: the QC page (`report`), `verify`, `inspect` (`describe`) and `diff`.

These read the store through the store layer and the committed manifests; they never write a store.
"""
