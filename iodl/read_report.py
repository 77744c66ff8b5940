"""Rank 0's side of `iodl read`: the result built from what the ranks handed over, printed and
written, DLIO's files, the live progress, the --runs aggregate.

Only rank 0 imports this module (iodl/cmd/read.py, before the run): what printing needs (rich,
the tables, the sizing, the series, DLIO's output, the progress line) is then no other rank's
start-up cost. At 72 ranks on 2 cores each module a rank imports costs ~36 times its import time.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from . import cache, dlio_output
from .mlperf import RUNS, aggregate_runs, data_size
from .outputs import write_result
from .plan import ranks_of_mount
from .progress import Progress
from .report import make_console, print_result, print_table
from .result import RESULT
from .series import write_csv
from .sizing import sizing_block

if TYPE_CHECKING:
    from .runner import Mount, Node


class ReadReport:
    """What rank 0 shows and writes of the runs of one `iodl read`."""

    def __init__(self, args):
        self.args = args
        self.console = make_console()

    def before_run(self, comm, spec, pattern, m, node) -> Progress | None:
        """What is known before the run (the page cache's warnings), and the live progress started."""
        if node.probes is not None:
            for line in cache.small_dataset_warnings(cache.node_view(node.probes, [])):
                self.console.print(f"[yellow]warning:[/] {line}")
        return _progress(comm, self.args, spec, pattern, m, node, self.console)

    def after_run(self, spec, pattern, parts, reduced, partial, m, node, facts, walls, ck_spec, ck_reduced,
                  missing, error: str | None = None) -> tuple[dict, dict | None]:
        """The run's result, printed and written; (result, DLIO's summary.json of it or None). error: a
        request that failed for good ended the run (the result is partial)."""
        result = _result(spec, pattern, parts, reduced, partial, node.probes, len(m.roots))
        if error is not None:
            result["error"] = error
        if ck_reduced is not None:
            result["checkpoint"] = {"write": ck_reduced["checkpoint"]["write"], "fsync": ck_spec.fsync,
                                    "roots": list(ck_spec.roots)}
            if ck_spec.endpoints:
                result["checkpoint"].update(endpoints=list(ck_spec.endpoints), part_size=ck_spec.part_size)
        if missing:
            result["missing_ranks"] = missing
        summary = _report(self.args, spec, pattern, result, m, reduced, parts, facts, walls, ck_reduced, missing,
                          self.console)
        return result, summary

    def runs(self, results: list[dict], dlio: list) -> None:
        """--runs N: MLPerf's aggregate of the runs, printed and written (--out keeps every run)."""
        agg = aggregate_runs(results, dlio)
        _print_runs(agg, self.console)
        if self.args.out:
            write_result({"schema": "iodl.runs/1", "runs": results, "mlperf": agg, "planned_runs": self.args.runs,
                          "procedure_runs": RUNS}, self.args.out)


def _print_runs(agg: dict, console) -> None:
    rows = [[str(r["run"]) + (" (warm-up)" if r["warmup"] else ""), f"{r['bandwidth_MBps']:,.1f}",
             f"{r['au']:.1%}" if r["au"] is not None else "-",
             f"{r['dlio_au_percentage']:.2f}" if r["dlio_au_percentage"] is not None else "-",
             f"{r['dlio_samples_per_s']:,.1f}" if r["dlio_samples_per_s"] is not None else "-",
             f"{r['dlio_io_MiBps']:,.1f}" if r["dlio_io_MiBps"] is not None else "-",
             r["dlio_au_meet_expectation"] or "-"] for r in agg["runs"]]
    print_table(console, f"{len(agg['runs'])} run(s) back to back", [
        ("run", "left"), ("MB/s", "right"), ("AU", "right"), ("DLIO AU %", "right"), ("DLIO samples/s", "right"),
        ("DLIO MiB/s", "right"), ("AU met", "left")], rows)
    console.print(agg["summary"], highlight=False, markup=False)


def _datasize_warning(wl, reduced: dict, shards: int, root: str, console) -> None:
    """MLPerf Storage's dataset-size rule (iodl datasize) for this run's ranks and hosts: say so
    when the dataset is smaller. Memory: rank 0's host's, taken as every host's."""
    need = data_size(wl, reduced["ranks"], len(reduced["hosts"]), cache.meminfo().get("MemTotal", 0))
    if shards < need.files:
        console.print(f"[yellow]warning:[/] {root} holds {shards:,} files; MLPerf Storage's rules ask at least "
                      f"{need.files:,} for {reduced['ranks']} accelerator(s) on {len(reduced['hosts'])} host(s) "
                      f"(500 steps x batch, and 5x the client memory): `iodl datasize` says why")

def _progress(comm, args, spec, pattern, m: Mount, node: Node, console) -> Progress | None:
    """Rank 0's live per-mount MB/s (--progress), started."""
    if comm.rank != 0 or not (args.progress == "on" or (args.progress == "auto" and console.is_terminal)):
        return None
    # storage-only and infer-async are measured over [ramp, ramp + duration] after the start
    # barrier, fixed in advance (their ranks are not in step); train-sync over its steps' span
    total_s = spec.ramp_s + spec.duration_s if spec.fixed_window else (spec.duration_s or 0.0)
    total_steps = pattern.planned_steps(spec, m.total_samples, len(ranks_of_mount(m.index, len(m.roots), comm.size)))
    return Progress(node.shared.mm, node.mounts, m.roots, total_s=total_s,
                    total_steps=total_steps if not spec.duration_s else 0,
                    other_nodes=node.shared.node_size < comm.size or not node.shared.shared, console=console).start()

def _result(spec, pattern, parts, reduced: dict, partial: bool, probes, n_mounts: int) -> dict:
    """Rank 0: the run's result (iodl/result.py), the pattern's own blocks in it."""
    blocks = pattern.summarize(spec, parts, reduced, partial)   # before the result: it may re-window reduced
    result = {"schema": RESULT, "pattern": spec.pattern, "engine": spec.engine, "direct": spec.direct,
              "iodepth": spec.iodepth, "block_size": spec.block_size, "ranks": reduced["ranks"],
              "hosts": reduced["hosts"], "workload": spec.workload.to_dict(), "seed": spec.seed,
              "duration_s": spec.duration_s or None, "ramp_s": spec.ramp_s if spec.fixed_window else None,
              "partial": partial, "window_s": reduced["window_s"], "total": reduced["total"],
              "mounts": reduced["mounts"], "per_rank": reduced["per_rank"], **blocks}
    if reduced.get("endpoints"):
        result["endpoints"] = reduced["endpoints"]
    if probes is not None:
        result["nodes"] = cache.node_view(probes, reduced["per_rank"])
        result["total"]["cache"], per_mount = cache.cache_blocks(result["nodes"], n_mounts)
        for entry, block in zip(result["mounts"], per_mount):
            entry["cache"] = block
        result["drop_caches"] = spec.drop_caches
    demand = pattern.demand(spec, parts, n_mounts)
    if demand is not None and math.isfinite(demand[0]):   # a workload without compute time asks for no particular rate
        result["sizing"] = sizing_block(result, *demand)
    if reduced["series"] is not None:
        result["series"] = reduced["series"]
    return result

def _report(args, spec, pattern, result: dict, m: Mount, reduced: dict, parts, facts, walls, ck_reduced, missing,
            console) -> dict | None:
    """Rank 0: the result printed and written, DLIO's files written; DLIO's summary.json or None."""
    print_result(result, console, detail=args.detail)
    if ck_reduced is not None:
        w = result["checkpoint"]["write"]
        console.print(f"in-training checkpoints: {w['rounds'] if w else 0} written"
                      + (f", {w['bytes'] / 1e9:,.3f} GB in {w['duration_s']:.2f} s ({w['bandwidth_MBps']:,.1f} MB/s); "
                         f"the steps waited {result['train']['checkpoint_s_per_step']:.3f} s per step for them"
                         if w else "")
                      + (f"; {w['ios']:,} PUTs ({w['ops_per_s']:,.1f}/s), {w['retries']} retries, {w['errors']} errors"
                         if w and "retries" in w else ""), highlight=False, markup=False)
    if pattern.accelerators and not m.synthetic:
        _datasize_warning(spec.workload, reduced, len(m.sizes), m.roots[m.index], console)
    summary = None
    if args.dlio_dir and pattern.accelerators and missing:
        console.print("DLIO's files are not written: some ranks did not answer, and DLIO's figures are of "
                      "every rank", highlight=False, markup=False)
    elif args.dlio_dir and pattern.accelerators:
        summary = _write_dlio(args, spec.workload, spec, result, [r for _m, r in parts], facts, len(m.sizes), walls,
                              ck_reduced, console)
    if args.out and args.runs == 1:
        write_result(result, args.out)
    if args.csv:
        write_csv(result, args.csv)
    return summary

def _write_dlio(args, wl, spec, result: dict, steps: list, facts: list[dict], files: int,
                walls: tuple[float, float], ck_reduced, console) -> dict:
    """DLIO's files of this run in mlpstorage's run directory (iodl/dlio_output.py); its summary.
    walls: wall clock at the run's start (after set-up's checks) and just before its start barrier."""
    hosts = [p["host"] for p in sorted(result["per_rank"], key=lambda p: p["rank"])]
    ck_bytes = 0
    if ck_reduced is not None and result["checkpoint"]["write"]:
        w = result["checkpoint"]["write"]
        ck_bytes = w["bytes"] // max(w["rounds"], 1)
    wall_start, wall0 = walls
    summary = dlio_output.summary(steps, facts, hosts, wl, files, wall_start, time.time(), ck_bytes)
    outputs = [dlio_output.rank_output(rows, fact, summary["data_size_per_host_GB"], wall0) for rows, fact in zip(steps, facts)]
    config = dlio_output.dlio_config(wl, files, spec.batch_size, spec.compute_time_s, spec.epochs, ck_bytes > 0, spec.steps)
    overrides = [f"workload={wl.name}", f"++workload.dataset.num_files_train={files}"]
    model = config["workload"]["model"]["name"]
    path = dlio_output.write_run(args.dlio_dir, dlio_output.run_directory(args.dlio_dir, model, wall_start), summary, outputs,
                         config, overrides, result)
    m = summary["metric"]
    if m:
        console.print(f"DLIO's figures (docs/mlperf.md): AU {m['train_au_mean_percentage']:.2f} % "
                      f"({m['train_au_meet_expectation']}), {m['train_throughput_mean_samples_per_second']:,.1f} "
                      f"samples/s, {m['train_io_mean_MB_per_second']:,.1f} MiB/s; written to {path}",
                      highlight=False, markup=False)
    return summary
