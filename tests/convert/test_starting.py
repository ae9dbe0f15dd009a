"""The embedded cluster the `labzarr` command starts in a thread while it imports (`run/starting.py`): a run takes
that very cluster, with the spec's retry count, and closes it; one a run never took is stopped by its owner."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np

from labzarr.convert import convert_delivery
from labzarr.convert.run.starting import StartingCluster


def _delivery(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    nib.save(nib.Nifti1Image(np.arange(60, dtype=np.int16).reshape(3, 4, 5), np.eye(4)), raw / "case001.nii")
    spec = tmp_path / "manifests" / "s" / "delivery.toml"
    spec.parent.mkdir(parents=True)
    spec.write_text(f'[delivery]\nname = "s"\nraw = "{raw}"\nstore = "{tmp_path / "s.zarr"}"\n\n'
                    "[run]\ncrash_retries = 3\n")
    return spec


def test_a_run_takes_the_starting_cluster_with_the_specs_retries_and_closes_it(tmp_path: Path) -> None:
    spec = _delivery(tmp_path)
    with StartingCluster(1) as starting:
        result = convert_delivery(spec, cluster=starting)
        used = starting._cluster  # what the run took, looked at without taking it again
        assert used is not None
        assert used.status.name == "closed"  # the run's own: closed when the run ended, before its owner's close
        assert used.scheduler is not None and used.scheduler.allowed_failures == 3
    assert [r.status for r in result.rows] == ["ok"]


def test_a_starting_cluster_no_run_took_is_stopped_by_its_owner(tmp_path: Path) -> None:
    with StartingCluster(1) as starting:
        pass
    cluster = starting._cluster
    assert cluster is not None and cluster.status.name == "closed"
    assert not cluster.workers  # its worker processes are gone too
