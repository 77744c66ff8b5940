"""The emulator's own cost (result.train.emulator, docs/numbers.md): its CPU per step against an
independent measurement, and its arithmetic on step records whose CPU is known.

Ground truth: the kernel's account of the whole rank process, taken by the parent at its exit
(wait4's rusage: every thread, start-up included). Two runs that differ only in their step count
differ in CPU by the extra steps' cost alone (start-up, set-up and the result cost the same), so
(CPU of the long run - CPU of the short run) / (extra steps) is the CPU of a step, measured
outside the process and by another clock than the one iodl reads.
"""
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from iodl.reduce import emulator_cpu
from iodl.result import STEP_FIELDS

# LONG - SHORT steps make the start-up's variance (~0.1 CPU s between two runs) a small share of the
# truth: 0.1 s over 200 steps was ~0.5 ms of a ~0.9 ms step (one CI run: pairs of 0.51, 1.59, 0.71 ms);
# over 600 steps a slower day's pairs still ranged 0.33-0.78 ms against a steady 0.55-0.63 figure
SHORT, LONG, PAIRS = 50, 1450, 3
BATCH = 240   # samples per step: ten times the workload's, so that 1,400 steps cost ~0.8 CPU s or more
TOLERANCE = 0.30   # of the figure: the two runs' start-ups and the machine's load vary by a few 10 ms


def _run(tmp_path, steps: int) -> tuple[float, dict]:
    """(CPU seconds of the rank process as its parent saw it, the result's emulator block)."""
    out = tmp_path / f"steps{steps}.json"
    # the null engine (no dataset: only the emulator works) with a short compute, so that steps are many
    p = subprocess.Popen([sys.executable, "-m", "iodl", "read", "--workload", "retinanet_b200", "--engine", "null",
                          "--steps", str(steps), "--compute-time", "0.002", "--batch-size", str(BATCH),
                          "--progress", "off", "--out", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, p.stderr.read()
    p.stderr.close()
    with open(out, encoding="utf-8") as f:
        return usage.ru_utime + usage.ru_stime, json.load(f)["train"]["emulator"]


def test_cpu_per_step_is_what_the_kernel_charged_the_process_per_step(tmp_path):
    measured, reported = [], []
    for _ in range(PAIRS):   # interleaved: a change of load touches both runs of a pair alike
        cpu_short, _ = _run(tmp_path, SHORT)
        cpu_long, emu = _run(tmp_path, LONG)
        measured.append((cpu_long - cpu_short) / (LONG - SHORT))
        reported.append(emu["cpu_s_per_step"])
        rank = emu["by_rank"][0]
        assert rank["rank"] == 0 and rank["cpu_s_per_step"] == emu["cpu_s_per_step"]
        assert rank["cpu_s_per_sample"] == pytest.approx(emu["cpu_s_per_step"] / BATCH, rel=1e-9)
        assert 0 < emu["loader_cpu_s_per_step"] < emu["cpu_s_per_step"]
    truth, figure = statistics.median(measured), statistics.median(reported)
    print(f"CPU per step: wait4 difference {measured}, the result's {reported}")
    assert figure == pytest.approx(truth, rel=TOLERANCE), (measured, reported)


def _records(steps: int, cpu: float, loop_cpu: float, compute: float, epoch_of=lambda i: 0) -> np.ndarray:
    rows = [{"t_start": i * 0.1, "t_end": (i + 1) * 0.1, "compute": compute, "samples": 10, "cpu": cpu,
             "loop_cpu": loop_cpu, "epoch": epoch_of(i)} for i in range(steps)]
    return np.array([[r.get(f, 0.0) for f in STEP_FIELDS] for r in rows])


def test_the_figures_from_known_step_cpu():
    # rank 0: 4 ms a step, 1 ms of it in the step loop; rank 1: 8 ms, all in loaders; both on host a
    # (2 cores), compute 10 ms a step; rank 2 alone on host b (1 core): 2 ms a step
    rows = [_records(5, 0.004, 0.001, 0.010), _records(5, 0.008, 0.0, 0.010), _records(5, 0.002, 0.002, 0.010)]
    counted = [np.array([False, True, True, True, True])] * 3
    emu = emulator_cpu(rows, counted, [0, 1, 2], ["a", "a", "b"], [2, 2, 1], au=0.5, au_threshold=0.9,
                       no_storage=False)
    assert [r["cpu_s_per_step"] for r in emu["by_rank"]] == pytest.approx([0.004, 0.008, 0.002])
    assert [r["cpu_s_per_sample"] for r in emu["by_rank"]] == pytest.approx([0.0004, 0.0008, 0.0002])
    assert [r["loader_cpu_s_per_step"] for r in emu["by_rank"]] == pytest.approx([0.003, 0.008, 0.0])
    assert emu["cpu_s_per_step"] == pytest.approx(0.014 / 3)
    assert emu["cpu_s_per_sample"] == pytest.approx(0.014 / 30)
    # host a: 12 ms of CPU per 10 ms step on 2 cores = 0.6; host b: 2 / 10 = 0.2
    assert emu["client_cpu_share"] == pytest.approx(0.6)
    assert emu["client_bound"] is False   # AU is low, but the client had CPU to spare and storage ran
    assert emulator_cpu(rows, counted, [0, 1, 2], ["a", "a", "b"], [2, 2, 1], 0.5, 0.9, no_storage=True)["client_bound"]
    # one core on host a: 1.2 of it needed while computing: the client is what held AU down
    bound = emulator_cpu(rows, counted, [0, 1, 2], ["a", "a", "b"], [1, 1, 1], 0.5, 0.9, no_storage=False)
    assert bound["client_cpu_share"] == pytest.approx(1.2) and bound["client_bound"]
    assert not emulator_cpu(rows, counted, [0, 1, 2], ["a", "a", "b"], [1, 1, 1], 0.95, 0.9, False)["client_bound"]
