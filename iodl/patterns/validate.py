"""validate: the ranks of a mount read its dataset once between them, every shard whole, and
check that each is a regular file at least as long as its manifest says."""
from __future__ import annotations

import numpy as np

from .. import plan
from ..data.open import validate_block
from ..data.tables import int_rows
from .base import Pattern, Run, duration_default
from .shards import read_shards


class Validate(Pattern):
    name = "validate"

    def configure(self, spec):
        return duration_default(spec)   # reported as the run's duration; the dataset's end ends it

    def run(self, run: Run) -> bool:
        sizes = int_rows(run.sizes)
        run.part = (len(sizes), int(np.sum(sizes)))   # what the mount's dataset holds: every rank of it says so
        members = plan.ranks_of_mount(run.mount, run.n_mounts, run.comm.size)
        share = plan.validate_share(len(sizes), members.index(run.comm.rank), len(members))
        return read_shards(run, lambda epoch: share if epoch == 0 else None, None)

    def summarize(self, spec, parts, reduced, partial):
        return {"validate": validate_block([(mount, *part) for mount, part in parts if part is not None],
                                           reduced["total"]["bytes"])}


VALIDATE = Validate()
