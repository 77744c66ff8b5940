"""DLIO / MLPerf Storage workload YAML, read as iodl workloads (`--workload FILE.yaml`).

Both forms DLIO uses: a workload file (top level: model, framework, workflow, dataset, reader,
train, checkpoint, metric, ...) and the resolved config a run saves (the same under `workload:`).
Every key any DLIO version reads (tests/dlio/data: each version's LoadConfig keys, from its own
code) is either honoured (it becomes an iodl workload setting), shown as informational (it shapes
nothing iodl emulates: iodl says so), or refused with the reason; a key no DLIO version reads is
refused with its file and line. DLIO itself falls back to a default for a misspelt key (a
`record_length_byte` silently reads 64 KiB records): iodl never does. A file is read as the DLIO
of its MLPerf Storage round read it (dlio_version_of). The table of every key is docs/dlio.md;
KEYS below is its source.

Where a key is absent, DLIO's own default applies (not iodl's): e.g. no shuffling, batch 1,
seed 123.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Callable

import yaml

from .checkpoint import DATATYPES
from .errors import UsageError
from .formats import FORMATS, PARQUET_DTYPES, parquet_record_bytes
from .records import record

HONOUR, INFO, REFUSE = "honoured", "informational", "refused"


@record(frozen=True)
class Rule:
    how: str                          # HONOUR, INFO or REFUSE
    why: str                          # what iodl does with it, or why not
    to: tuple[str, str] | None = None # HONOUR: the iodl [section] key it sets
    conv: Callable | None = None      # HONOUR: DLIO value -> iodl value (ValueError: refused with the reason)


def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number, got {v!r}")
    return v


def _bytes(v) -> str:
    # resnet50's record_length_bytes is 114660.07: a byte count is whole, so it is rounded
    return f"{round(_number(v))}B"


def _compute(v):
    """computation_time: a number, or {mean, stdev} / a distribution. iodl's compute is a fixed
    sleep per step: a spread other than 0 cannot be honoured."""
    if isinstance(v, dict):
        extra = {k: x for k, x in v.items() if k not in ("mean", "stdev")}
        if extra or _number(v.get("stdev", 0)) != 0:
            raise ValueError("iodl's compute is a fixed sleep per step: give a number (or mean with stdev 0)")
        return _number(v.get("mean", 0))
    return _number(v)


def _fmt(v):
    if v == "mmap_indexed_binary":
        # the same files as indexed_binary, read through a memory map (page faults and the kernel's
        # readahead decide the requests): iodl reads with read calls only
        raise ValueError("the indexed_binary files read through mmap; iodl reads with read calls: "
                         "give format: indexed_binary for the same files read sample by sample")
    if v not in FORMATS:
        raise ValueError(f"iodl lays out {', '.join(FORMATS)} datasets; {v!r} is not one of them yet")
    return v


def _compression(v):
    if v not in ("none", None):
        raise ValueError(f"iodl writes incompressible data uncompressed; compression {v!r} is not emulated: give none")
    return v


def _pq_columns(v):
    # checked key by key as [dataset] columns (workload._columns)
    if not isinstance(v, list):
        raise ValueError(f"must be a list of {{name, dtype, size, read}} mappings, got {v!r}")
    return v


_POSIX = ("local_fs", "parallel_fs")


def _storage_type(v):
    """-> posix, direct or object. DLIO's local_fs and parallel_fs are POSIX paths, read as iodl
    reads them; the fork's direct_fs is a POSIX path read with O_DIRECT (mlpstorage --o-direct);
    s3 is a bucket, read from --root s3://BUCKET/PREFIX (docs/s3.md)."""
    if v in _POSIX:
        return "posix"
    if v == "direct_fs":
        return "direct"
    if v == "s3":
        return "object"
    if v == "aistore":
        raise ValueError("aistore is an object store iodl does not speak (it reads POSIX paths and S3)")
    raise ValueError(f"must be local_fs, parallel_fs, direct_fs or s3, got {v!r}")


def _storage_library(v):
    """-> O_DIRECT or not: the fork's local readers read with O_DIRECT when the library is
    `direct` (its older single-knob form); any other library reads buffered."""
    return v == "direct"


def _storage_options(v):
    """-> O_DIRECT or not: uri_scheme `direct` (what mlpstorage --o-direct sets) or the older
    storage_library `direct` in the options; the rest configures an object-store client."""
    if not isinstance(v, dict):
        raise ValueError(f"must be a mapping of options, got {v!r}")
    return v.get("uri_scheme") == "direct" or v.get("storage_library") == "direct"


def _file_access(v):
    if v != "multi":
        raise ValueError("iodl reads each file on its own (DLIO's file_access multi); "
                         f"{v!r} (one shared file through MPI-IO) is not emulated")
    return v


def _legacy_model_size(v):
    return _model_bytes(v)


def _flag(v):
    if not isinstance(v, bool):
        raise ValueError(f"must be True or False, got {v!r}")
    return v


def _count(v):
    """DLIO's -1 (none, off) is iodl's 0."""
    v = _number(v)
    if v != int(v):
        raise ValueError(f"must be a whole number, got {v!r}")
    return max(int(v), 0)


def _positive(v):
    v = _count(v)
    if v < 1:
        raise ValueError(f"must be at least 1, got {v!r}")
    return v


def _whole(v):
    """A byte count where 0 is a value of its own (DLIO's transfer_size 0)."""
    v = _number(v)
    if v != int(v) or v < 0:
        raise ValueError(f"must be a whole number >= 0, got {v!r}")
    return int(v)


def _dlio_bool(v):
    """As DLIO's LoadConfig reads skip_listing: a string is true if it says so, anything else by truth."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


def _seconds(v):
    return max(_number(v), 0)          # DLIO's default -1: no compute between checkpoints


def _model_bytes(v):
    return f"{_count(v)}B"


def _mode(v):
    if v not in ("default", "subset"):
        raise ValueError(f"must be default or subset, got {v!r}")
    return v


def _datatype(v):
    if v not in DATATYPES:
        raise ValueError(f"must be one of {', '.join(DATATYPES)}, got {v!r}")
    return v


_SHUFFLE = {"off": False, "seed": True, "random": True, False: False, True: True, None: False}


def _shuffle_flag(v):
    if v not in _SHUFFLE:
        raise ValueError(f"must be off, seed or random, got {v!r}")
    return _SHUFFLE[v]


_IO = "shapes nothing iodl emulates"
NOREAD = "no DLIO version reads it: DLIO would silently use its default here"
_ORDER = ("tensorflow or pytorch: iodl's reads follow the format either way (whole shards sequentially; "
          "indexed_binary sample by sample at the index's offsets)")

# section -> key -> Rule. DLIO's key names (dlio_benchmark utils/config.py), with 2.0.0's older
# record_length* names, which iodl honours as DLIO 2.0.0 did.
KEYS: dict[str, dict[str, Rule]] = {
    # model.* and checkpoint.* shape checkpoints (iodl checkpoint, docs/checkpoint.md); they take
    # effect when workflow.checkpoint is True, as in DLIO
    "model": {
        "name": Rule(INFO, "names the workload"),
        "type": Rule(HONOUR, "transformer, or the kind of a flat model (cnn)", ("model", "type"), str),
        "model_size": Rule(INFO, "no DLIO version reads it (a flat model's size is model.model_size_bytes, and "
                                 "checkpoint.model_size before 2025): DLIO writes its default 10,240-byte model, and "
                                 "so does iodl; DLIO's and MLPerf's unet3d files carry it"),
        "model_size_bytes": Rule(HONOUR, "a flat model's bytes", ("model", "model_size"), _model_bytes),
        "num_layers": Rule(HONOUR, "transformer layers", ("model", "num_layers"), _count),
        "model_datatype": Rule(HONOUR, "element type of the model", ("model", "model_datatype"), _datatype),
        "optimizer_datatype": Rule(HONOUR, "element type of the optimizer state", ("model", "optimizer_datatype"),
                                   _datatype),
        **{f"parallelism.{k}": Rule(HONOUR, "how the model is split over ranks", ("parallelism", k), _count)
           for k in ("tensor", "pipeline", "data", "zero_stage")},
        **{f"transformer.{k}": Rule(HONOUR, "the transformer's shape", ("model", k), _count)
           for k in ("vocab_size", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads")},
        **{k: Rule(REFUSE, f"no DLIO version reads it here, only under model.transformer (DLIO would ignore "
                           f"it): write transformer.{k}") for k in (
            "vocab_size", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads")},
        "layer_parameters": Rule(REFUSE, "DLIO's older predefined layer sizes: give the transformer's shape"),
        "optimization_groups": Rule(REFUSE, "DLIO's older predefined optimizer groups: give the transformer's shape"),
    },
    "framework": {},     # a scalar section: see _SCALARS
    "workflow": {
        "generate_data": Rule(INFO, "iodl generate lays out the dataset"),
        "train": Rule(HONOUR, "training: the train-sync pattern; False with checkpoint True: a checkpoint-only "
                              "workload (iodl checkpoint); False otherwise is refused", ("workload", "pattern"), _flag),
        "checkpoint": Rule(HONOUR, "checkpoints: model.* and checkpoint.* take effect (iodl checkpoint)", None,
                           _flag),
        "evaluation": Rule(INFO, "evaluation reads are not emulated"),
        "profiling": Rule(INFO, "DLIO's profiler: iodl measures on its own"),
        "debug": Rule(INFO, "DLIO's debug logging (DLIO 2.0.0 and before): no I/O"),
    },
    "dataset": {
        "format": Rule(HONOUR, "the shard format", ("dataset", "format"), _fmt),
        "num_files_train": Rule(HONOUR, "shards", ("dataset", "files"), _number),
        "num_samples_per_file": Rule(HONOUR, "samples per shard", ("dataset", "samples_per_file"), _number),
        "record_length_bytes": Rule(HONOUR, "mean sample size (rounded to whole bytes)", ("dataset", "sample_size"), _bytes),
        "record_length": Rule(HONOUR, "DLIO 2.0.0's name of record_length_bytes", ("dataset", "sample_size"), _bytes),
        "record_length_bytes_stdev": Rule(HONOUR, "sample size spread (rounded to whole bytes)",
                                          ("dataset", "sample_size_stdev"), _bytes),
        "record_length_stdev": Rule(HONOUR, "DLIO 2.0.0's name of record_length_bytes_stdev",
                                    ("dataset", "sample_size_stdev"), _bytes),
        "record_length_bytes_resize": Rule(INFO, "the decoded tensor's size in memory: no I/O"),
        "record_length_resize": Rule(INFO, "DLIO 2.0.0's name of record_length_bytes_resize: no I/O"),
        "data_folder": Rule(INFO, "where the data is: give it as --root"),
        "num_subfolders_train": Rule(HONOUR, "folders per copy, file i in folder i % N (0: as few as keep each at "
                                     "most 10,000 files, where DLIO's 0 would put them all in one); reading "
                                     "honours any layout", ("dataset", "subfolders"), _number),
        "num_files_eval": Rule(INFO, "evaluation reads are not emulated"),
        "num_subfolders_eval": Rule(INFO, "evaluation reads are not emulated"),
        "num_samples_per_file_eval": Rule(REFUSE, NOREAD),
        "file_prefix": Rule(HONOUR, "the files' prefix with skip_listing (iodl's own datasets name their files)",
                            ("read", "file_prefix"), str),
        "keep_files": Rule(INFO, _IO),
        "record_dims": Rule(INFO, "the sample's array shape: no I/O"),
        "record_element_type": Rule(INFO, "the sample's element type: no I/O"),
        "enable_chunking": Rule(INFO, "hdf5 chunking: iodl lays out contiguous hdf5"),
        "chunk_size": Rule(INFO, "hdf5 chunking: iodl lays out contiguous hdf5"),
        "compression": Rule(HONOUR, "none only: iodl writes incompressible data uncompressed", None, _compression),
        "parquet.columns": Rule(HONOUR, "parquet columns: name, dtype, size (values per row), read (false: the "
                                "reader skips the column's chunks)", ("dataset", "columns"), _pq_columns),
        "parquet.row_group_size": Rule(HONOUR, "parquet rows per row group", ("dataset", "row_group_size"), _number),
        "parquet.read_mode": Rule(INFO, "no DLIO version reads it; DLIO's parquet readers, as iodl's, read by "
                                  "row group (MLPerf's dlrm_b200 file carries it)"),
        "parquet.generation_batch_size": Rule(INFO, "rows per write while DLIO generates: no read I/O"),
        "parquet.use_s3dlio_gen": Rule(INFO, "object-store generation: iodl writes POSIX files"),
        "parquet.partition_by": Rule(REFUSE, "hive-partitioned directories: iodl lays out one file per shard"),
        "compression_level": Rule(REFUSE, "iodl writes incompressible data uncompressed"),
        "generation_buffer_size": Rule(INFO, "the buffer DLIO's generator writes through: no read I/O"),
        "data_gen_method": Rule(INFO, "how DLIO's generator makes the bytes (dgen or numpy): no read I/O"),
        "record_element_bytes": Rule(INFO, "the sample's element size: no I/O"),
        **{f"hdf5.{k}": Rule(REFUSE, "iodl lays out one contiguous dataset per hdf5 file; DLIO's chunked and "
                                     "multi-dataset hdf5 layouts are not emulated")
           for k in ("chunk_dims", "num_dset_per_record", "max_shape")},
        **{f"arrow.{k}": Rule(REFUSE, "iodl lays out no Arrow IPC datasets yet") for k in (
            "columns", "generation_batch_size")},
        "num_files_generated": Rule(REFUSE, "with skip_listing, the names of a larger generated set: iodl derives "
                                    "the names of the files it reads only"),
        "total_disk_bytes": Rule(INFO, "mlpstorage's figure of the dataset's bytes on disk (MLPerf's tooling "
                                 "writes it; no DLIO version reads it): iodl sizes the dataset from its files"),
        "skip_listing": Rule(HONOUR, "no directory listing: a plain directory's names are derived as DLIO derives "
                             "them (PREFIX_I_of_N.FORMAT, folder I % num_subfolders_train)", ("read", "skip_listing"),
                             _dlio_bool),
        "listing_validation_interval": Rule(HONOUR, "with skip_listing: DLIO checks that the first, last and "
                                            "every N-th derived name exist (0: none); iodl looks at every one "
                                            "(it needs their sizes)",
                                            ("read", "listing_validation_interval"), _count),
    },
    "reader": {
        "batch_size": Rule(HONOUR, "samples per step per rank", ("train", "batch_size"), _number),
        "read_threads": Rule(HONOUR, "reader threads of the input pipeline", ("read", "read_threads"), _number),
        "file_shuffle": Rule(HONOUR, "shuffle the shard order each epoch (seed and random both: iodl is seeded)",
                             ("train", "shuffle"), _shuffle_flag),
        "sample_shuffle": Rule(HONOUR, "shuffle samples in a buffer of shuffle_size (indexed_binary: each "
                               "rank's whole share, as DLIO's sampler)", ("train", "shuffle"), _shuffle_flag),
        "shuffle_size": Rule(HONOUR, "the sample-shuffle buffer", ("train", "shuffle_size"), _number),
        "prefetch_size": Rule(HONOUR, "batches read ahead of compute (pytorch: read_threads x "
                              "ceil(prefetch_size / read_threads), DLIO's prefetch_factor per worker; none without "
                              "workers)", None, _count),
        "data_loader": Rule(INFO, _ORDER + "; with pytorch, prefetch_size is DLIO's per-worker rule"),
        "computation_threads": Rule(HONOUR, "threads that decode what the readers read (tf.data map; no I/O of its own)",
                                    ("read", "computation_threads"), _positive),
        "transfer_size": Rule(HONOUR, "tfrecord: TensorFlow's read buffer, iodl's request size (0: no buffer, "
                              "each record's 12-byte header, then its data with its CRC; absent: TensorFlow's "
                              "256 KiB); DLIO's other readers do not use it", ("read", "transfer_size"), _whole),
        "batch_size_eval": Rule(INFO, "evaluation reads are not emulated"),
        "dont_use_mmap": Rule(INFO, "iodl reads with read calls, never mmap"),
        "odirect": Rule(HONOUR, "O_DIRECT reads, for npz and npy (DLIO's readers of those formats open the file "
                        "O_DIRECT; DLIO refuses it for any other format, and so does iodl)", ("read", "direct"), _flag),
        "read_type": Rule(INFO, _IO),
        "pin_memory": Rule(INFO, _IO),
        "multiprocessing_context": Rule(INFO, _IO),
        "data_loader_classname": Rule(REFUSE, "custom data loaders are DLIO code"),
        "data_loader_sampler": Rule(INFO, _IO),
        "write_threads": Rule(INFO, "threads of DLIO's generator: no read I/O"),
        "file_access": Rule(HONOUR, "multi only: each file read on its own", None, _file_access),
        "transformed_record_dims": Rule(INFO, "the decoded tensor's shape in memory: no I/O"),
        "transformed_record_element_type": Rule(INFO, "the decoded tensor's element type: no I/O"),
        "computatation_threads": Rule(HONOUR, "DLIO 0.5's spelling of computation_threads (DLIO 0.5 read this one)",
                                      ("read", "computation_threads"), _positive),
        "reader_classname": Rule(REFUSE, "custom readers are DLIO code"),
        "preprocess_time": Rule(REFUSE, "a per-sample preprocessing time is not emulated"),
        "preprocess_time_stdev": Rule(REFUSE, "a per-sample preprocessing time is not emulated"),
    },
    "train": {
        "computation_time": Rule(HONOUR, "emulated compute per step", ("train", "compute_time_s"), _compute),
        "computation_time_stdev": Rule(REFUSE, "iodl's compute is a fixed sleep per step"),
        "epochs": Rule(HONOUR, "epochs", ("train", "epochs"), _number),
        "seed": Rule(HONOUR, "seed of sizes, content and order", ("train", "seed"), _number),
        "seed_change_epoch": Rule(INFO, "iodl's order changes every epoch"),
        "total_training_steps": Rule(HONOUR, "most steps of each epoch (DLIO's step counter starts again each epoch; "
                                     "-1: all)", ("train", "total_steps"), _count),
    },
    "evaluation": {k: Rule(INFO, "evaluation is not emulated") for k in (
        "eval_time", "eval_time_stdev", "epochs_between_evals", "eval_after_epoch")},
    "checkpoint": {
        "checkpoint_folder": Rule(INFO, "where the checkpoints go: give it as --root"),
        "checkpoint_after_epoch": Rule(HONOUR, "first epoch that ends with a checkpoint", ("checkpoint", "after_epoch"),
                                       _number),
        "epochs_between_checkpoints": Rule(HONOUR, "epochs between checkpoints", ("checkpoint", "every_epochs"),
                                           _number),
        "steps_between_checkpoints": Rule(HONOUR, "steps between checkpoints (-1: by epochs)",
                                          ("checkpoint", "every_steps"), _count),
        "num_checkpoints_write": Rule(HONOUR, "checkpoints a checkpoint run writes (-1: none)",
                                      ("checkpoint", "writes"), _count),
        "num_checkpoints_read": Rule(HONOUR, "checkpoints a checkpoint run reads back (-1: none)",
                                     ("checkpoint", "reads"), _count),
        "fsync": Rule(HONOUR, "fsync each file written (DLIO itself drops it: docs/checkpoint.md)",
                      ("checkpoint", "fsync"), _flag),
        "time_between_checkpoints": Rule(HONOUR, "emulated compute before each checkpoint (-1: none)",
                                         ("checkpoint", "time_between_s"), _seconds),
        "mode": Rule(HONOUR, "default or subset: iodl's subset is --ranks fewer than TP x PP x DP "
                             "(subset needs model.parallelism.data)", None, _mode),
        "model_size": Rule(HONOUR, "a flat model's bytes as DLIO 2.0.0 and before read them (MLPerf Storage "
                                   "v0.5, v1.0); DLIO since reads model.model_size_bytes and not this",
                           ("model", "model_size"), _legacy_model_size),
        "type": Rule(INFO, "rank_zero or all_ranks: in DLIO since 2025 the model's layout decides who writes; "
                           "DLIO 2.0.0's all_ranks is refused where it applies"),
        "checkpoint_type": Rule(REFUSE, NOREAD + " (DLIO's key is checkpoint.type)"),
        "checkpoint_mechanism": Rule(REFUSE, NOREAD + " (DLIO picks its writer from the framework)"),
        **{k: Rule(REFUSE, "DLIO 2.0.0's own layer and optimizer tensors: iodl plans that DLIO's default "
                           "(one layer file of 24,757,599 B beside the model), not other sizes") for k in (
            "layer_parameters", "num_layers", "optimization_groups", "tensor_parallelism", "pipeline_parallelism")},
        **{f"ksm.{k}": Rule(INFO, "memory de-duplication of DLIO's tensors: no I/O") for k in (
            "madv_mergeable_id", "high_ram_trigger", "low_ram_exit", "await_time")},
        "recovery_rank_shift": Rule(INFO, "which rank reads which rank's files: same bytes"),
        "rank_sync": Rule(INFO, "a barrier after each checkpoint: no bytes"),
        "randomize_tensor": Rule(INFO, "the tensors' content: no bytes"),
        "ksm": Rule(INFO, "memory de-duplication of DLIO's tensors: no I/O"),
        "checkpoint_mechanism_classname": Rule(INFO, "a custom DLIO writer: iodl plans DLIO's own layout"),
    },
    "metric": {
        "au": Rule(HONOUR, "the AU a rank count must reach", ("metric", "au_threshold"), _number),
    },
    "output": {**{k: Rule(INFO, "iodl writes its own output (--out)") for k in ("folder", "log_file")},
               **{f"metric.{k}": Rule(INFO, "DLIO's metric window: no I/O (iodl's window is its own, "
                                       "docs/numbers.md)") for k in ("exclude_start_steps", "exclude_end_steps")}},
    "storage": {
        "storage_type": Rule(HONOUR, "local_fs and parallel_fs: a POSIX path (--root); direct_fs: the same read "
                                     "with O_DIRECT; s3: a bucket (--root s3://BUCKET/PREFIX); aistore is refused",
                             ("read", "storage"), _storage_type),
        "storage_root": Rule(INFO, "where the data is: give it as --root"),
        "storage_options": Rule(HONOUR, "uri_scheme or storage_library direct: O_DIRECT reads (the fork's "
                                        "local readers); endpoint_url: [read] endpoint, the run's "
                                        "--endpoint unless one is given; the other options configure DLIO's "
                                        "object-store client (credentials come from the AWS environment, never the file)",
                                ("read", "direct"), _storage_options),
        "storage_library": Rule(HONOUR, "direct: O_DIRECT reads (the fork's older form); another library reads "
                                        "buffered", ("read", "direct"), _storage_library),
        "post_generation_settle_seconds": Rule(INFO, "a pause after DLIO generates data: no read I/O"),
        "s3_force_path_style": Rule(INFO, "an S3 client setting (mlpstorage writes it; no DLIO version reads it)"),
    },
    "profiling": {**{k: Rule(INFO, "DLIO's profiler: iodl measures on its own") for k in ("profiler", "iostat_devices")},
                  "tensorboard": Rule(REFUSE, NOREAD)},
}
# sections whose value is one scalar
_SCALARS = {"framework": Rule(INFO, _ORDER)}
# the resolved config a DLIO run saves wraps the workload in `workload:`, next to hydra's own keys
_RESOLVED_EXTRA = {"hydra", "defaults"}

# DLIO's defaults (utils/config.py) where iodl's differ: a key the file leaves out means DLIO's value
_DLIO_DEFAULTS = {("train", "batch_size"): 1, ("read", "read_threads"): 1, ("train", "epochs"): 1,
                  ("train", "compute_time_s"): 0.0, ("train", "seed"): 123, ("train", "shuffle_size"): 1024,
                  ("metric", "au_threshold"): 0.90, ("workload", "pattern"): "train-sync",
                  ("dataset", "format"): "tfrecord", ("dataset", "files"): 8, ("dataset", "samples_per_file"): 1,
                  ("dataset", "sample_size"): "65536B"}
# ... and of a checkpoint (utils/config.py): -1 counts are 0 here
_DLIO_CHECKPOINT_DEFAULTS = {("checkpoint", "writes"): 0, ("checkpoint", "reads"): 0, ("checkpoint", "fsync"): False,
                             ("checkpoint", "time_between_s"): 0.0, ("checkpoint", "every_steps"): 0,
                             ("checkpoint", "after_epoch"): 1, ("checkpoint", "every_epochs"): 1,
                             ("parallelism", "tensor"): 1, ("parallelism", "pipeline"): 1,
                             ("parallelism", "zero_stage"): 0, ("model", "model_datatype"): "fp16",
                             ("model", "optimizer_datatype"): "fp32"}
_DLIO_TRANSFORMER = {"vocab_size": 32000, "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 8,
                     "ffn_hidden_size": 8192}
_DLIO_MODEL_SIZE = 10240          # bytes of a flat model that gives none
# MLPerf Storage's closed division: model.name -> (TP, PP, DP). mlpstorage (mlpstorage/config.py
# LLM_ALLOWED_VALUES) runs these files on TP*PP*DP ranks and sets model.parallelism.data itself in
# subset mode; a file that names one of them, with its TP and PP and no data, gets that DP here
_MLPERF_CLOSED = {"llama_8b": (1, 1, 8), "llama_70b": (8, 1, 8), "llama_405b": (8, 32, 2), "llama_1t": (8, 64, 2)}


# The DLIO versions MLPerf Storage's rounds ran (docs/dlio.md): 0.5 and 1.0 are DLIO 2.0.0 and
# before (argonne-lcf/dlio_benchmark at mlcommons/storage's v0.5 and v1.0 submodules), 2.0 the
# mlperf_storage_v2.0 branch, 3.0 the MLCommons fork. They read different keys and wrote different
# checkpoints; a file says which by its keys (_LEGACY_KEYS) unless --dlio-version does.
DLIO_VERSIONS = ("0.5", "1.0", "2.0", "3.0")
LEGACY = ("0.5", "1.0")
# keys only DLIO 2.0.0 and before read (tests/dlio/test_dlio_keys.py holds this set to the
# committed key lists): a file that gives one was written for MLPerf Storage v0.5 or v1.0.
# `model` is the model's name given alone (model: unet3d), which later DLIO reads as a mapping.
_LEGACY_KEYS = frozenset({
    "model", "workflow.debug", "dataset.record_length", "dataset.record_length_stdev", "dataset.record_length_resize",
    "checkpoint.model_size", "checkpoint.layer_parameters", "checkpoint.num_layers", "checkpoint.optimization_groups",
    "checkpoint.tensor_parallelism", "checkpoint.pipeline_parallelism", "reader.computatation_threads",
    "data_reader.computatation_threads"})


def dlio_version_of(top: dict) -> str:
    """The DLIO version a workload mapping was written for, by its keys: 1.0 for a file with a
    key only DLIO 2.0.0 and before read (record_length*, checkpoint.model_size, workflow.debug, ...;
    MLPerf Storage v0.5's files read the same keys as v1.0's, so --dlio-version 0.5 says which),
    else 3.0 (2.0 reads what 3.0 reads, for what iodl plans)."""
    def keys(node, prefix):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                yield prefix + k.value
                yield from keys(v, f"{prefix}{k.value}.")

    # `model: NAME` given alone is no tell: later DLIO reads it too ('name' in 'unet3d' is False,
    # so the name is left at its default) and DLIO's own later files still write it so
    for section, (_line, node) in top.items():
        if any(k in _LEGACY_KEYS for k in keys(node, f"{section}.")):
            return "1.0"
    return "3.0"


def load(path: str, dlio_version: str | None, build: Callable):
    """The iodl Workload a DLIO YAML file describes, as the DLIO of `dlio_version` (None: the one
    the file's keys say, dlio_version_of) read it (UsageError with file:line otherwise). `build`
    makes the Workload from iodl's keys (workload.workload_from_dict: passed in, as the workload
    module is the one that dispatches a YAML file here)."""
    label = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"workload {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{label}: not UTF-8 text") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{label}:{mark.line + 1}" if mark else label
        raise UsageError(f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    top = _mapping(root, label, "the file")
    if "workload" in top:   # a run's resolved config
        for key, (line, _v) in top.items():
            if key != "workload" and key not in _RESOLVED_EXTRA:
                raise UsageError(f"{label}:{line}: {key}: unknown top-level key (a resolved DLIO config holds "
                                 "`workload:` and hydra's keys)")
        top = _mapping(top["workload"][1], label, "workload")
    if dlio_version is not None and dlio_version not in DLIO_VERSIONS:
        raise UsageError(f"--dlio-version: one of {', '.join(DLIO_VERSIONS)}, got {dlio_version!r}")
    version = dlio_version or dlio_version_of(top)
    d, lines = _translate(top, label, version)
    no_dataset_line = d["workload"].pop("_no_dataset_line", None)
    d["workload"].setdefault("name", os.path.splitext(label)[0])
    d["workload"]["origin"] = f"{os.path.abspath(path)} (a DLIO workload file)"
    d["workload"]["description"] = (f"{label}: a DLIO/MLPerf Storage workload (model "
                                    f"{d['workload'].pop('model', '?')}) read by iodl (docs/dlio.md)")
    try:
        wl = build({**d.pop("workload"), **d, "source": os.path.abspath(path)}, label)
        if wl.dataset is None:
            wl = dataclasses.replace(wl, no_dataset=(
                f"{label}:{no_dataset_line}: [workflow] train: False: iodl read emulates training (train: true); "
                f"this file only checkpoints (workflow.checkpoint: True): plan it with "
                f"`iodl checkpoint --workload {path} --plan`"))
        return wl
    except UsageError as exc:
        # workload.py's checks name iodl's keys; put the DLIO key's line in front
        msg = str(exc)
        for (section, key), (line, dlio) in lines.items():
            if f"[{section}] {key}:" in msg:
                raise UsageError(f"{label}:{line}: {dlio}: {msg.split(f'[{section}] {key}: ', 1)[-1]}") from None
        raise


def _mapping(node, label: str, what: str) -> dict:
    """{key: (line, value node)} of a YAML mapping node; duplicate keys are refused."""
    if not isinstance(node, yaml.MappingNode):
        line = node.start_mark.line + 1 if node is not None else 1
        raise UsageError(f"{label}:{line}: {what}: must be a mapping of keys")
    out = {}
    for k, v in node.value:
        key = k.value
        if key in out:
            raise UsageError(f"{label}:{k.start_mark.line + 1}: {key}: given twice (first at line {out[key][0]})")
        out[key] = (k.start_mark.line + 1, v)
    return out


def _value(node):
    return yaml.constructor.SafeConstructor().construct_document(node) if node is not None else None


def _translate(top: dict, label: str, version: str = "3.0") -> tuple[dict, dict]:
    """The iodl workload dict of a DLIO mapping as DLIO `version` reads it, and (iodl section,
    key) -> (line, DLIO key)."""
    d: dict = {"workload": {}, "dataset": {}, "train": {}, "read": {}, "metric": {}, "model": {}, "parallelism": {},
               "checkpoint": {}}
    lines: dict = {}
    shuffle = {"file_shuffle": False, "sample_shuffle": False}
    flow: dict = {}                   # workflow.train / checkpoint, checkpoint.mode: (line, value)
    reader: dict = {}                 # reader keys whose effect depends on others: key -> (line, value)
    for section, (sline, node) in top.items():
        if section in _SCALARS:
            continue
        if section == "model" and isinstance(node, yaml.ScalarNode):
            # DLIO 2.0.0 (PyPI) and its bundled configs: `model: unet3d`, the name alone
            d["workload"]["model"] = str(_value(node))
            continue
        if section not in KEYS and section != "data_reader":
            hint = difflib.get_close_matches(section, list(KEYS) + list(_SCALARS), n=1)
            raise UsageError(f"{label}:{sline}: {section}: unknown section"
                             + (f" (did you mean {hint[0]}?)" if hint else ""))
        rules = KEYS["reader" if section == "data_reader" else section]    # DLIO's older name of reader
        for key, (line, vnode) in _entries(_mapping(node, label, section), rules, label, section):
            rule = rules.get(key)
            where = f"{label}:{line}: [{section}] {key}"
            if rule is None:
                hint = difflib.get_close_matches(key, rules, n=1)
                raise UsageError(f"{where}: not a key any DLIO version reads" + (f" (did you mean {hint[0]}?)" if hint else "")
                                 + "; DLIO would silently use its default here, iodl refuses")
            if rule.how == REFUSE:
                raise UsageError(f"{where}: not honoured: {rule.why}")
            if section == "model" and key == "name":
                d["workload"]["model"] = str(_value(vnode))
            if section == "checkpoint" and key == "type":
                flow["type"] = (line, _value(vnode))
            if section in ("reader", "data_reader") and key == "data_loader":
                reader[key] = (line, _value(vnode))
            if rule.how == INFO or not _read_by(version, section, key):
                continue
            try:
                value = rule.conv(_value(vnode))
            except ValueError as exc:
                raise UsageError(f"{where}: {exc}") from None
            if section in ("reader", "data_reader") and key in _READER_LATER:
                reader[key] = (line, value)
            if key in shuffle:
                shuffle[key] = value
                lines[("train", "shuffle")] = (line, f"[{section}] {key}")
                continue
            if (section, key) in (("workflow", "train"), ("workflow", "checkpoint"), ("checkpoint", "mode")):
                flow[key] = (line, value)
                continue
            if rule.to is None:       # checked, sets nothing (dataset.compression)
                continue
            if rule.to == ("read", "storage"):
                # storage_type: a bucket, or O_DIRECT as the other storage keys give it
                if value == "object":
                    d["read"]["storage"] = "object"
                    lines[("read", "storage")] = (line, f"[{section}] {key}")
                value = value == "direct"
            if (section, key) == ("storage", "storage_options") and _value(vnode).get("endpoint_url"):
                d["read"]["endpoint"] = str(_value(vnode)["endpoint_url"])
                lines[("read", "endpoint")] = (line, f"[{section}] {key}")
            if rule.to in (("read", "direct"), ("read", "storage")):
                # O_DIRECT from any of reader.odirect and the storage keys
                if value and not d["read"].get("direct"):
                    d["read"]["direct"] = True
                    lines[("read", "direct")] = (line, f"[{section}] {key}")
                continue
            target_section, target_key = rule.to
            d[target_section][target_key] = value
            lines[(target_section, target_key)] = (line, f"[{section}] {key}")
    both = (shuffle["file_shuffle"], shuffle["sample_shuffle"])
    d["train"]["shuffle"] = {(False, False): "none", (True, False): "file", (False, True): "sample",
                             (True, True): "file+sample"}[both]
    for (section, key), value in _DLIO_DEFAULTS.items():
        d[section].setdefault(key, value)
    _parquet_row(d)
    _reader_section(d, reader, label, lines)
    _checkpoint_sections(d, flow, label, version)
    return d, lines


def _read_by(version: str, section: str, key: str) -> bool:
    """Whether DLIO `version` reads a key iodl honours (the key lists: tests/dlio/data). Only
    the keys whose versions differ in what iodl does are told apart here."""
    if version in LEGACY:
        if (section, key) in (("reader", "odirect"), ("data_reader", "odirect"), ("dataset", "skip_listing"),
                              ("dataset", "listing_validation_interval"), ("storage", "storage_options"),
                              ("storage", "storage_library")):
            return False      # DLIO 2.0.0 and before read buffered and listed the folder
        if version == "0.5" and key == "computation_threads":
            return False      # DLIO 0.5 read computatation_threads, its misspelling, instead
        if section == "model" and key == "model_size_bytes":
            return False      # DLIO 2.0.0 and before read the size at checkpoint.model_size
        return True
    return not (section == "checkpoint" and key == "model_size") and key != "computatation_threads"


# reader keys set after the loop: what they do depends on the format and the data loader
_READER_LATER = ("transfer_size", "prefetch_size", "read_threads", "odirect")
TF_BUFFER = 256 << 10     # TensorFlow's TFRecordDataset buffer when buffer_size is None (readers.py)
# formats whose DLIO readers open O_DIRECT with odirect (reader/reader_factory.py: NPZReaderODIRECT,
# NPYReaderODirect); every other format's branch raises "O_DIRECT for <format> format is not yet supported"
ODIRECT_FORMATS = ("npz", "npy")


def _reader_section(d: dict, reader: dict, label: str, lines: dict) -> None:
    """odirect, transfer_size, prefetch_size and read_threads as DLIO's readers and loaders use them
    (dlio_benchmark reader/*.py, data_loader/*.py: the fork MLPerf Storage v3.0 runs,
    mlcommons/DLIO_local_changes@f6796ed, and argonne-lcf/dlio_benchmark v2.0.0 alike)."""
    fmt = d["dataset"].get("format")
    line, direct = reader.get("odirect", (None, False))
    if direct and fmt not in ODIRECT_FORMATS:
        raise UsageError(f"{label}:{line}: [reader] odirect: DLIO reads {fmt} without O_DIRECT (its reader "
                         f"raises 'O_DIRECT for {fmt} format is not yet supported'); O_DIRECT is for "
                         f"{' and '.join(ODIRECT_FORMATS)}")
    _line, threads = reader.get("read_threads", (None, 1))
    if direct:
        # DLIO's odirect readers: one readv of the whole file per loader worker (npz_reader_odirect.py)
        d["read"]["access"], d["read"]["iodepth"] = "whole", max(1, threads)
    if fmt == "npz" and not direct:
        # DLIO's npz reader: np.load, one file at a time per loader worker, each read through the
        # page cache in order (its first small reads set the kernel's readahead): iodl's reads of
        # a shard begin as np.load's do and go one at a time (plan.npz_load_plan)
        d["read"]["access"], d["read"]["iodepth"] = "np.load", 1
    if fmt == "tfrecord":
        # TensorFlow's reader reads a file one buffer at a time, in order (read_threads files at once)
        d["read"]["iodepth"] = 1
    if fmt == "tfrecord" and "transfer_size" not in reader:
        # DLIO's TFReader gives TFRecordDataset buffer_size=None: TensorFlow's own buffer (the read
        # path turns a given transfer_size into tfrecord's requests: training.request_shape)
        d["read"]["block_size"] = f"{TF_BUFFER}B"
    # read_threads 0: no loader workers (pytorch) or DLIO's 1 (tensorflow); iodl opens with at least one
    if not threads:
        d["read"]["read_threads"] = 1
    _line, prefetch = reader.get("prefetch_size", (None, 2))      # DLIO's default prefetch_size
    if reader.get("data_loader", (None, "tensorflow"))[1] == "pytorch":
        # torch DataLoader: read_threads workers, each prefetch_factor = ceil(prefetch_size /
        # read_threads) batches ahead (2 when that is 0); no workers: no prefetch
        prefetch = threads * (-(-prefetch // threads) or 2) if threads else 0
    d["train"]["prefetch"] = prefetch


def _parquet_row(d: dict) -> None:
    """With parquet.columns, a row is the columns' bytes (as DLIO's generator writes it), whatever
    record_length says (DLIO's parquet generator does not read it then)."""
    cols = d["dataset"].get("columns")
    if isinstance(cols, list) and cols and all(isinstance(c, dict) and c.get("dtype") in PARQUET_DTYPES
                                               and isinstance(c.get("size", 1), int) for c in cols):
        d["dataset"]["sample_size"] = f"{parquet_record_bytes(cols)}B"


def _entries(table: dict, rules: dict, label: str, section: str):
    """(key, (line, node)) of a section, a nested mapping's keys (model.parallelism.tensor) as
    `parallelism.tensor` when the rules know them so."""
    for key, (line, vnode) in table.items():
        if isinstance(vnode, yaml.MappingNode) and any(k.startswith(key + ".") for k in rules):
            for sub, (sline, snode) in _mapping(vnode, label, f"{section}.{key}").items():
                yield f"{key}.{sub}", (sline, snode)
        else:
            yield key, (line, vnode)


def _checkpoint_sections(d: dict, flow: dict, label: str, version: str = "3.0") -> None:
    """workflow.train / checkpoint decide what the file is: training (with checkpoints or not),
    or checkpoint-only; DLIO's defaults fill a checkpoint's unset keys."""
    train_line, train = flow.get("train", (None, True))
    ck_line, checkpoint = flow.get("checkpoint", (None, False))
    if not train and version in LEGACY:
        # DLIO 2.0.0 and before: train False is generate_only, whatever checkpoint says
        raise UsageError(f"{label}:{train_line}: [workflow] train: False: a data-generation file: DLIO 2.0.0 and "
                         "before (MLPerf Storage v0.5, v1.0) only generated data with it (no training, no "
                         "checkpoint); lay the dataset out with `iodl generate --workload` and the run's training file")
    if not train and not checkpoint:
        raise UsageError(f"{label}:{train_line}: [workflow] train: False: iodl read emulates training (train: true); "
                         "this file neither trains nor checkpoints (a data-generation workload)")
    d["workload"]["pattern"] = "train-sync"
    if not checkpoint:
        for section in ("model", "parallelism", "checkpoint"):
            d.pop(section)           # DLIO does not checkpoint: its model keys change nothing
        return
    model, par = d["model"], d["parallelism"]
    if version in LEGACY:
        # DLIO 2.0.0 and before wrote a flat model from rank 0 only (checkpoint.type rank_zero)
        type_line, where = flow.get("type", (None, "rank_zero"))
        if where != "rank_zero":
            raise UsageError(f"{label}:{type_line}: [checkpoint] type: {where}: DLIO {version}'s every-rank "
                             "checkpoint is not planned by iodl (rank_zero, DLIO's default, is)")
        model.pop("num_layers", None)
        model["layout"] = f"dlio-{version}"
    if model.get("num_layers"):
        model.setdefault("type", "transformer")
        for key, value in _DLIO_TRANSFORMER.items():
            model.setdefault(key, value)
    else:
        model.pop("num_layers", None)
        model.setdefault("type", "generic")
        model.setdefault("model_size", f"{_DLIO_MODEL_SIZE}B")
    for (section, key), value in _DLIO_CHECKPOINT_DEFAULTS.items():
        d[section].setdefault(key, value)
    if not par.get("data"):
        par.pop("data", None)
        closed = _MLPERF_CLOSED.get(d["workload"].get("model"))
        if closed and closed[:2] == (par["tensor"], par["pipeline"]):
            par["data"] = closed[2]
    mode_line, mode = flow.get("mode", (None, "default"))
    if mode == "subset" and "data" not in par:
        raise UsageError(f"{label}:{mode_line}: [checkpoint] mode: subset needs model.parallelism.data, the full "
                         "run's data parallelism (as in DLIO)")
    if not train:
        for section in ("dataset", "train"):
            d.pop(section)           # checkpoint-only: DLIO reads no dataset
        d["workload"]["_no_dataset_line"] = train_line


def key_table() -> list[tuple[str, str, str, str]]:
    """(section, key, how, why) of every DLIO key iodl knows: the table of docs/dlio.md."""
    rows = [(s, k, r.how, r.why + (f" -> [{r.to[0]}] {r.to[1]}" if r.to else "")) for s, keys in KEYS.items()
            for k, r in keys.items()]
    rows += [(s, "", r.how, r.why) for s, r in _SCALARS.items()]
    return rows


def stance(dotted: str) -> Rule | None:
    """iodl's rule for a DLIO key given dotted (`reader.odirect`, `model.parallelism.tensor`,
    `data_reader.batch_size`, `framework`), or None: a key iodl does not know. A key inside a
    mapping DLIO takes whole (`storage.storage_options.uri_scheme`) has that mapping's rule."""
    section, _, rest = dotted.partition(".")
    if not rest:
        if section in _SCALARS:
            return _SCALARS[section]
        # DLIO 2.0.0 and before: `model: NAME`, the model's name alone
        return Rule(INFO, "names the workload (DLIO 2.0.0 and before: model: NAME)") if section == "model" else None
    rules = KEYS.get("reader" if section == "data_reader" else section, {})
    parts = rest.split(".")
    for n in range(len(parts), 0, -1):
        rule = rules.get(".".join(parts[:n]))
        if rule is not None:
            return rule
    return None
