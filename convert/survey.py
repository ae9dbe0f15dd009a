"""What a delivery holds before anything is decoded: its files, probed in this process, and their formats.

`labzarr check` and `labzarr init` look at a delivery the way `convert` does (the same walk, the
same include/exclude rules, the same content sniffing), but without a cluster: `probe` is the I/O,
`format_counts` is pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from labzarr.readers import Reader

from .discover import Candidate
from .probe import Probe, probe_files

__all__ = ["format_counts", "probe", "readable"]


def readable(c: Candidate) -> bool:
    """A candidate `convert` would probe: not excluded, not a symlink out of raw, a regular file."""
    return not c.excluded_by and not c.entry.outside and not c.entry.special and not c.entry.unreadable


def probe(candidates: Sequence[Candidate], readers: Sequence[Reader]) -> dict[str, Probe]:
    """Probe every readable candidate here (hash, sniffed kind, headers), keyed by relative path."""
    todo = [(c.rel, str(c.entry.path)) for c in candidates if readable(c)]
    return {p.rel: p for p in probe_files(todo, readers)}


def format_counts(candidates: Sequence[Candidate], probes: Mapping[str, Probe]) -> dict[str, int]:
    """Files per sniffed format (a reader's kind), then those no reader knows, excluded or unreadable;
    largest first, ties by name."""
    counts: Counter[str] = Counter()
    for c in candidates:
        p = probes.get(c.rel)
        if c.excluded_by:
            counts["excluded"] += 1
        elif p is None or p.error:
            counts["unreadable"] += 1
        elif p.kind:
            counts[p.kind] += 1
        else:
            counts["text" if p.text else "other (no reader)"] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
