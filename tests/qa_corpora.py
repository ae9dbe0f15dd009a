"""The public dcm2niix QA corpora (real scanner exports), read from bare git mirrors beside the project.

The five repositories (`neurolabusc/dcm_qa_nih`, `dcm_qa`, `dcm_qa_ge`, `dcm_qa_philips`, `dcm_qa_enh`) are
found as `<mirrors>/neurolabusc+<name>/repo`, git directories with no work tree (`../.mirror` beside the
project by default). Only their `In/` folder (the DICOM files) is read: listed with `git ls-tree`, written out
with one `git cat-file --batch`. A mirror may lack some blobs (a partial clone): those files are counted as
missing, never guessed. Nothing here downloads; an absent corpus is reported, and callers skip or go on.
The bench (bench/dicom.py) and the tests share this module.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CORPORA", "DEFAULT_MIRRORS", "Corpus", "extract", "find", "read_blob"]

CORPORA: tuple[str, ...] = ("dcm_qa_nih", "dcm_qa", "dcm_qa_ge", "dcm_qa_philips", "dcm_qa_enh")
OWNER = "neurolabusc"
DEFAULT_MIRRORS = Path(__file__).resolve().parents[1].parent / ".mirror"


@dataclass(frozen=True, slots=True)
class Corpus:
    """One corpus's mirror: `repo` its git directory; `files` the `In/` blobs it holds as (path, sha, size),
    `missing` how many `In/` entries name a blob the mirror lacks."""

    name: str
    repo: Path
    files: tuple[tuple[str, str, int], ...]
    missing: int

    @property
    def nbytes(self) -> int:
        return sum(size for _, _, size in self.files)


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", f"--git-dir={repo}", *args], input=stdin, capture_output=True, check=True).stdout


def find(name: str, mirrors: Path = DEFAULT_MIRRORS) -> Corpus | None:
    """The corpus `name` under `mirrors`, or None when its mirror is not there (or is not a git directory)."""
    repo = mirrors / f"{OWNER}+{name}" / "repo"
    if not (repo / "HEAD").is_file():
        return None
    try:
        listing = _git(repo, "ls-tree", "-r", "-l", "-z", "HEAD", "--", "In/")
    except subprocess.CalledProcessError:
        return None
    files, missing = [], 0
    for entry in filter(None, listing.split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        _, kind, sha, size = meta.split()
        if kind != b"blob":
            continue
        if not size.isdigit():  # git lists a blob the mirror does not hold with no size
            missing += 1
            continue
        files.append((path.decode(), sha.decode(), int(size)))
    return Corpus(name, repo, tuple(files), missing)


def _blobs(repo: Path, shas: Iterable[str]) -> list[bytes]:
    """The blobs `shas`, in order, through one `git cat-file --batch`."""
    wanted = list(shas)
    out = _git(repo, "cat-file", "--batch", stdin="".join(f"{s}\n" for s in wanted).encode())
    blobs, pos = [], 0
    for sha in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise FileNotFoundError(f"{repo}: blob {sha} is not in the mirror ({out[pos:end].decode()})")
        size = int(header[2])
        blobs.append(out[end + 1:end + 1 + size])
        pos = end + 1 + size + 1  # the blob, then a newline
    return blobs


def read_blob(corpus: Corpus, path: str) -> bytes:
    """One `In/` file's bytes."""
    (sha,) = [s for p, s, _ in corpus.files if p == path]
    return _blobs(corpus.repo, [sha])[0]


def extract(corpus: Corpus, dest: Path) -> Path:
    """Write the corpus's `In/` files under `dest` (their paths below `In/`) once; a later call finds them.

    `dest.extracted`, beside `dest` (inside it would be one more file of the delivery), is written last."""
    done = dest.with_name(dest.name + ".extracted")
    if done.is_file() and done.read_text() == _stamp(corpus):
        return dest
    for batch in range(0, len(corpus.files), 500):  # a bounded amount of the corpus in memory at once
        part = corpus.files[batch:batch + 500]
        for (path, _, _), data in zip(part, _blobs(corpus.repo, [s for _, s, _ in part]), strict=True):
            target = dest / path.removeprefix("In/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    done.write_text(_stamp(corpus))
    return dest


def _stamp(corpus: Corpus) -> str:
    return f"{corpus.name} {len(corpus.files)} files {corpus.nbytes} bytes\n"
