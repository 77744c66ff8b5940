import numpy as np

from iodl.result import STEP_FIELDS
from iodl.training import StepRecords


def test_step_rows_are_the_steps_raw_times_in_seconds():
    """StepRecords keeps a step's clock readings raw and makes the STEP_FIELDS rows at the end: each
    field against the arithmetic written out, for steps of two epochs, one with a checkpoint."""
    t0 = 10**12
    rec = StepRecords(t0, samples=24, steps_per_epoch=2)
    # (start, fetched, computed, end) ns after t0, checkpoint s, bytes, process and loop CPU ns
    steps = [(0, 1_000_000, 48_550_000, 50_000_000, 0.0, 7_750_968, 1_500_000, 90_000),
             (50_000_000, 50_200_000, 97_750_000, 99_000_000, 0.0, 7_750_968, 1_400_000, 80_000),
             (99_000_000, 99_000_001, 146_550_001, 300_000_000, 0.15, 7_750_968, 2_000_000, 100_000)]
    for s, f, c, e, ck, b, cpu, loop in steps:
        rec.add(t0 + s, t0 + f, t0 + c, t0 + e, ck, b, cpu, loop)
    a = rec.array()
    assert a.shape == (3, len(STEP_FIELDS))
    col = {name: a[:, i] for i, name in enumerate(STEP_FIELDS)}
    for i, (s, f, c, e, ck, b, cpu, loop) in enumerate(steps):
        assert col["t_start"][i] == s / 1e9 and col["t_end"][i] == e / 1e9
        assert np.isclose(col["data_wait"][i], (f - s) / 1e9, rtol=0, atol=1e-12)
        assert np.isclose(col["compute"][i], (c - f) / 1e9, rtol=0, atol=1e-12)
        assert np.isclose(col["barrier"][i], (e - c) / 1e9 - ck, rtol=0, atol=1e-12)
        assert (col["bytes"][i], col["samples"][i], col["checkpoint"][i]) == (b, 24, ck)
        assert col["epoch"][i] == i // 2
        assert (col["cpu"][i], col["loop_cpu"][i]) == (cpu / 1e9, loop / 1e9)
    assert StepRecords(t0, 24, 2).array().shape == (0, len(STEP_FIELDS))
