"""The public dcm2niix QA corpora (real scanner exports), where this machine holds them.

They are read from bare git directories beside the project, `../.mirror/neurolabusc+<name>/repo`, with `git
ls-tree` and `git cat-file --batch`, never from the network; a corpus that is absent yields no files, and a test
using it says so in one skip line. A blob the mirror lacks (a partial copy) is left out.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CORPORA = ("dcm_qa_nih", "dcm_qa", "dcm_qa_ge", "dcm_qa_philips", "dcm_qa_enh")
MIRROR = Path(__file__).resolve().parents[1].parent / ".mirror"


def corpus_repo(name: str) -> Path | None:
    """The corpus' git directory, or None when this machine has no copy."""
    repo = MIRROR / f"neurolabusc+{name}" / "repo"
    return repo if (repo / "HEAD").is_file() else None


def extract(name: str, dest: Path) -> list[Path]:
    """Write the corpus' `In/` files under `dest` and return their paths, sorted; [] when the corpus is absent."""
    repo = corpus_repo(name)
    if repo is None:
        return []
    listing = subprocess.run(["git", f"--git-dir={repo}", "ls-tree", "-r", "HEAD", "In/"], capture_output=True,
                             text=True, check=True).stdout
    blobs = []
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _, kind, sha = meta.split()
        if kind == "blob":
            blobs.append((sha, path))
    out = []
    with subprocess.Popen(["git", f"--git-dir={repo}", "cat-file", "--batch"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        for sha, path in blobs:
            proc.stdin.write(sha.encode() + b"\n")
            proc.stdin.flush()
            head = proc.stdout.readline().split()
            if head[-1] == b"missing":
                continue
            data = proc.stdout.read(int(head[2]))
            proc.stdout.read(1)
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            out.append(target)
        proc.stdin.close()
    return sorted(out)
