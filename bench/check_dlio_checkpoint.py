"""iodl's checkpoint plan against DLIO's own checkpointing code, rank by rank and file by file.

tests/unit/test_checkpoint_model.py holds iodl's plan to the formulas written out by hand; this
holds it to the code MLPerf Storage runs. It loads `dlio_benchmark/checkpointing/
base_checkpointing.py` from a DLIO source tree (MLPerf Storage v3.0 runs the
mlcommons/DLIO_local_changes fork; `git clone` it, or unpack a dlio-benchmark sdist), replaces the
three modules it reaches for at start-up (its config singleton, MPI and storage) with stand-ins that
hold one rank's numbers, and lets DLIO's own __init__ and save_checkpoint decide, for every rank,
which states it allocates and which files it saves. Tensors are placeholders that carry their size
in bytes, as the fork's own file backend does (`_SizePlaceholder`), so llama3-1t's 1,024 ranks take
seconds and no memory. Each rank's (file name, bytes) list must equal iodl.checkpoint.rank_files().

Nothing is written and no MPI starts; psutil (imported by DLIO's module, used only by its KSM
option) is stood in for when it is not installed.

Usage: python bench/check_dlio_checkpoint.py --dlio-src PATH [--origin TEXT] [--out bench/results]
Exit 0 when every case agrees, 1 otherwise; prints a table (and writes it with --out).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from iodl import checkpoint as C  # noqa: E402
from iodl.workload import load_workload  # noqa: E402

GiB = 2 ** 30


class _Quiet:
    """DLIO's logger: output/info/debug lines are not wanted here."""
    def __getattr__(self, _name):
        return lambda *a, **k: None


class _Comm:
    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size

    def allreduce(self, value):
        return value                      # only DLIO's log line of the total uses it


class _MPI:
    """DLIOMPI.get_instance() as one rank of `size` sees it."""
    def __init__(self, rank: int, size: int):
        self._comm = _Comm(rank, size)

    def comm(self):
        return self._comm

    def rank(self):
        return self._comm.rank


class _Storage:
    def create_namespace(self, exist_ok=False):
        pass

    def create_node(self, name, exist_ok=False):
        pass


def _load_dlio(src: str):
    """DLIO's base_checkpointing module, with stand-ins for the modules that need a configured
    DLIO (hydra config, MPI, storage backends). enumerations is DLIO's own (plain enums)."""
    state = types.SimpleNamespace(args=None, mpi=None)
    pkg = os.path.join(src, "dlio_benchmark")
    for name in ("dlio_benchmark", "dlio_benchmark.common", "dlio_benchmark.storage",
                 "dlio_benchmark.utils", "dlio_benchmark.checkpointing"):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(src, *name.split("."))]
        sys.modules[name] = mod
    spec = importlib.util.spec_from_file_location("dlio_benchmark.common.enumerations",
                                                  os.path.join(pkg, "common", "enumerations.py"))
    enums = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = enums
    spec.loader.exec_module(enums)

    config = types.ModuleType("dlio_benchmark.utils.config")
    config.ConfigArguments = type("ConfigArguments", (), {"get_instance": staticmethod(lambda: state.args)})
    utility = types.ModuleType("dlio_benchmark.utils.utility")
    utility.DLIOMPI = type("DLIOMPI", (), {"get_instance": staticmethod(lambda: state.mpi)})
    utility.utcnow = lambda: ""
    factory = types.ModuleType("dlio_benchmark.storage.storage_factory")
    factory.StorageFactory = type("StorageFactory", (), {"get_storage": lambda self, *a: _Storage()})
    for mod in (config, utility, factory):
        sys.modules[mod.__name__] = mod
    try:
        import psutil  # noqa: F401
    except ImportError:
        sys.modules["psutil"] = types.ModuleType("psutil")

    spec = importlib.util.spec_from_file_location(
        "dlio_benchmark.checkpointing.base_checkpointing", os.path.join(pkg, "checkpointing", "base_checkpointing.py"))
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)

    class Sizes(base.BaseCheckpointing):
        """DLIO's checkpointing with placeholder tensors; save_state records (file, bytes)."""
        def __init__(self):
            self.saved: list[tuple[str, int]] = []
            super().__init__("pt")

        def get_tensor_core(self, length, datatype="int8", randomize=True):
            return ("bytes", int(length) * base.get_datatype_size(datatype))

        def set_madvise_mergeable(self, tensor):
            return False

        def save_state(self, suffix, state, fsync=False):
            self.saved.append((os.path.basename(suffix) + "." + self.ext, _bytes(state)))

        def load_state(self, suffix, state):
            pass

        def save_checkpoint(self, epoch, step_number):
            super().save_checkpoint(epoch, step_number)

        def load_checkpoint(self, epoch, step_number):
            pass

        def finalize(self):
            pass

    return state, enums, Sizes


def _bytes(state) -> int:
    if isinstance(state, tuple) and state and state[0] == "bytes":
        return state[1]
    if isinstance(state, dict):
        return sum(_bytes(v) for v in state.values())
    raise TypeError(f"unexpected state {type(state).__name__}")


def _args(enums, cm: C.CheckpointModel, rank: int, size: int, subset: bool):
    """The ConfigArguments fields DLIO's checkpointing reads, as DLIO's config reader sets them
    from the YAML keys iodl maps (docs/dlio.md)."""
    m, p = cm.model, cm.parallelism
    return types.SimpleNamespace(
        storage_type=None, checkpoint_folder="/nonexistent", framework=None, logger=_Quiet(),
        pipeline_parallelism=p.pipeline, tensor_parallelism=p.tensor,
        # DLIO: -1 unless set; mlpstorage sets it (with checkpoint.mode subset) for a subset run
        data_parallelism=p.data if subset else -1,
        comm_size=size, my_rank=rank, checkpoint_randomize_tensor=False,
        ksm_madv_mergeable_id=12, ksm_init=False, ksm_low_ram_exit=50, ksm_high_ram_trigger=60,
        ksm_await_time=200, optimization_groups=[], layer_parameters=[],
        num_layers=m.num_layers if m.is_transformer else -1, zero_stage=p.zero_stage,
        model_size=m.model_size, model_type=m.type,
        checkpoint_mode=enums.CheckpointModeType.SUBSET if subset else enums.CheckpointModeType.DEFAULT,
        hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_attention_heads, num_kv_heads=m.num_kv_heads, vocab_size=m.vocab_size,
        model_datatype=m.model_datatype, optimizer_datatype=m.optimizer_datatype, checkpoint_fsync=True)


def dlio_files(dlio, cm: C.CheckpointModel, ranks: int) -> list[list[tuple[str, int]]]:
    state, enums, Sizes = dlio
    subset = C.layout(cm, ranks).subset
    out = []
    for r in range(ranks):
        state.args = _args(enums, cm, r, ranks, subset)
        state.mpi = _MPI(r, ranks)
        ck = Sizes()
        ck.save_checkpoint(1, 1)
        out.append(ck.saved)
    return out


def cases():
    """(label, CheckpointModel, ranks): the built-ins as MLPerf runs them, subset runs, more
    ranks than the workload's DP, and small models that reach each ZeRO stage's branches with
    uneven layer splits and odd sizes (integer divisions that do not come out even)."""
    out = []
    for name in ("llama3-8b", "llama3-70b", "llama3-405b", "llama3-1t"):
        cm = load_workload(name, need_dataset=False).checkpoint_model()
        out.append((name, cm, C.layout(cm).ranks))
    for name, ranks in (("llama3-70b", 16), ("llama3-405b", 8), ("llama3-1t", 64)):
        out.append((f"{name}, subset", load_workload(name, need_dataset=False).checkpoint_model(), ranks))
    out.append(("llama3-8b, 16 ranks", load_workload("llama3-8b", need_dataset=False).checkpoint_model(), 16))
    unet = load_workload("unet3d_h100", need_dataset=False).checkpoint_model()
    out.append(("unet3d_h100 (flat, ZeRO 0)", unet, 8))
    out.append(("unet3d_h100 (flat, ZeRO 1)", dataclasses.replace(
        unet, parallelism=dataclasses.replace(unet.parallelism, zero_stage=1)), 4))
    odd = C.ModelSpec(num_layers=7, hidden_size=1000, ffn_hidden_size=2731, num_attention_heads=12,
                      num_kv_heads=4, vocab_size=50257, model_datatype="bf16", optimizer_datatype="fp32")
    for tp, pp, dp, zero in ((1, 1, 3, 0), (2, 3, 2, 0), (3, 1, 5, 3), (2, 3, 2, 1), (1, 4, 3, 2),
                             (4, 1, 3, 1), (1, 1, 7, 3)):
        par = C.ParallelismSpec(tensor=tp, pipeline=pp, data=dp, zero_stage=zero)
        out.append((f"odd 7-layer, {tp}x{pp}x{dp} ZeRO {zero}", C.CheckpointModel("odd", odd, par), tp * pp * dp))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlio-src", required=True, help="a DLIO source tree (holds dlio_benchmark/)")
    ap.add_argument("--origin", help="where the tree came from (default: its git commit)")
    ap.add_argument("--out", help="folder to write checkpoint-vs-dlio-code.md into")
    a = ap.parse_args(argv)
    dlio = _load_dlio(os.path.abspath(a.dlio_src))
    origin = a.origin
    if not origin:
        try:
            origin = "commit " + subprocess.run(["git", "-C", a.dlio_src, "rev-parse", "HEAD"], capture_output=True,
                                                text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            origin = "(not a git tree; give --origin)"
    rows, bad = [], 0
    for label, cm, ranks in cases():
        want = dlio_files(dlio, cm, ranks)
        got = C.plan(cm, ranks).files
        files = sum(len(f) for f in want)
        same = sum(1 for r in range(ranks) if want[r] == got[r])
        total = sum(b for f in want for _n, b in f)
        ok = same == ranks
        bad += not ok
        if not ok:
            r = next(r for r in range(ranks) if want[r] != got[r])
            print(f"{label}: rank {r}: DLIO {want[r]} iodl {got[r]}", file=sys.stderr)
        rows.append(f"| {label} | {ranks:,} | {files:,} | {total:,} | {total / GiB:,.2f} | "
                    f"{same:,}/{ranks:,} | {'yes' if ok else 'NO'} |")
    text = "\n".join([
        "# iodl checkpoint plan vs DLIO's checkpointing code, rank by rank",
        "",
        f"DLIO source: {origin} (`dlio_benchmark/checkpointing/base_checkpointing.py`: its "
        "__init__ and save_checkpoint, run once per rank with placeholder tensors). A rank agrees when its "
        "list of (file name, bytes), in DLIO's order, equals iodl's `rank_files`.",
        "",
        "| case | ranks | files | bytes (DLIO) | GiB | ranks that agree | all agree |",
        "|---|---:|---:|---:|---:|---:|---|",
        *rows, ""])
    print(text)
    if a.out:
        with open(os.path.join(a.out, "checkpoint-vs-dlio-code.md"), "w") as f:
            f.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
