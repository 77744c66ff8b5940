"""Datasets on disk. One module a job, none importing another in a circle:

    layout       where a root's files sit and their names, derived from indices
    files        reading and writing a root's files safely (regular files only, never through a link)
    tables       the .npy tables (file sizes, sample sizes, extents), rows read when looked up (a batch's at once)
    manifest     a root's iodl-dataset.json, read once and checked; the workload a read of roots runs
    listing      a plain directory's files (a foreign dataset); what a folder already holds
    open         a root opened for reading (Dataset)
    generate     writing a workload's dataset under roots, and the default dataset
    small_files  generate's batched path for small shards
"""
