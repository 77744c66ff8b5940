"""fio's option table as iodl needs it: every name fio 3.33 knows, its value type, and iodl's stance.

The names and types come from `fio --cmdhelp=all` (fio 3.33) plus the engine options of libaio and
io_uring, so an option fio knows but iodl cannot emulate is *unsupported*, while a name fio does not
know either is *unknown* (with a did-you-mean, as fio's own "Bad option" does).
"""
from __future__ import annotations

import difflib

# Value types, as fio's parser treats them (parse.c __handle_option):
#   int   integer with size suffix under kb_base, "r,w,t" / "r:w" / "r-w" split (OPT_INT, OPT_STR_VAL)
#   time  integer with time suffix; bare numbers are seconds (is_seconds) -> microseconds
#   utime integer with time suffix; bare numbers are microseconds (thinktime family)
#   bool  0/1 only (OPT_BOOL); set = bool that may also appear bare, meaning 1 (OPT_STR_SET)
#   range lo-hi or lo:hi, ends swapped if reversed (OPT_RANGE)
#   str   free text or a keyword (OPT_STR, OPT_STR_STORE); float = ':'-separated floats
_TYPES = {
    "int": """bs ba iodepth iodepth_batch iodepth_batch_complete_min iodepth_batch_complete_max
        iodepth_low offset_align percentage_random nrfiles openfiles fsync fdatasync write_barrier loops
        numjobs verify_interval verify_offset verify_async verify_backlog_batch trim_percentage
        trim_backlog_batch replay_scale replay_align replay_time_scale max_open_zones job_max_open_zones
        rwmixread rwmixwrite nice prio prioclass thinktime_blocks rate rate_min rate_cycle
        rate_iops rate_iops_min max_latency cpumask bwavgtime iopsavgtime log_entries log_avg_msec
        log_hist_msec log_hist_coarseness log_compression log_alternate_epoch_clock_id
        buffer_compress_percentage buffer_compress_chunk dedupe_percentage dedupe_working_set_percentage
        significant_figures gtod_cpu cgroup_weight uid gid hugepage-size flow_id flow flow_sleep
        size io_size offset offset_increment zoneskip number_ios sync_file_range zonesize zonecapacity
        zonerange sqthread_poll_cpu force_async percentage_sequential iomem_align verifysort_nr rwmixcycle
        gpu_dev_id flow_watermark hipri_percentage cmdprio_percentage cmdprio_class cmdprio""",
    "time": "startdelay runtime ramp_time latency_target latency_window steadystate_duration steadystate_ramp_time",
    "utime": "thinktime thinktime_spin thinktime_iotime",
    "bool": """unique_filename randrepeat serialize_overlap fill_device file_append allrandrepeat direct
        atomic buffered overwrite do_verify verify_fatal verify_dump experimental_verify verify_state_load
        verify_state_save trim_verify_zero read_iolog_chunked replay_no_stall read_beyond_wp
        ignore_zone_limits rate_ignore_thinktime latency_run invalidate create_serialize create_fsync
        create_on_open create_only allow_file_create allow_mounted_write pre_read end_fsync fsync_on_close
        unlink unlink_each_loop per_job_logs log_max_value log_offset log_prio log_store_compressed
        log_unix_epoch log_alternate_epoch block_error_percentiles stats scramble_buffers dedupe_global
        clat_percentiles lat_percentiles slat_percentiles disk_util gtod_reduce disable_lat disable_clat
        disable_slat disable_bw_measurement error_dump cgroup_nodelete nowait
        nonvectored uncached bs_is_seq_rand softrandommap verifysort""",
    "set": """bs_unaligned norandommap time_based verify_only exitall exitall_on_error stonewall new_group
        thread group_reporting zero_buffers refill_buffers userspace_reap hipri fixedbufs registerfiles
        sqthread_poll""",
    "range": "bsrange filesize",
    "float": "merge_blktrace_scalars merge_blktrace_iters zone_reset_threshold zone_reset_frequency latency_percentile percentile_list",
    "str": """description name wait_for filename lockfile directory filename_format opendir rw bssplit randseed
        ignore_error rw_sequencer ioengine io_submit_mode random_generator random_distribution fallocate
        fadvise_hint clocksource mem verify verify_pattern verify_backlog trim_backlog write_iolog read_iolog
        replay_redirect replay_skip merge_blktrace_file exec_prerun exec_postrun ioscheduler zonemode
        lockmem rate_process sync write_hint cpus_allowed cpus_allowed_policy numa_cpu_nodes
        numa_mem_policy exit_what write_bw_log write_lat_log write_iops_log write_hist_log
        log_compression_cpus buffer_pattern dedupe_mode unified_rw_reporting continue_on_error profile
        cgroup kb_base unit_base steadystate file_service_type thinktime_blocks_type verify_async_cpus
        cmdprio_bssplit""",
}
TYPE = {name: kind for kind, names in _TYPES.items() for name in names.split()}

ALIASES = {
    "readwrite": "rw", "blocksize": "bs", "blockalign": "ba", "blocksize_range": "bsrange",
    "blocksize_unaligned": "bs_unaligned", "iodepth_batch_submit": "iodepth_batch",
    "iodepth_batch_complete": "iodepth_batch_complete_min", "io_limit": "io_size", "fill_fs": "fill_device",
    "fileoffset": "offset", "nr_files": "nrfiles", "timeout": "runtime", "iomem": "mem", "ratemin": "rate_min",
    "ratecycle": "rate_cycle", "wait_for_previous": "stonewall", "disable_bw": "disable_bw_measurement",
    "ss": "steadystate", "ss_dur": "steadystate_duration", "ss_ramp": "steadystate_ramp_time",
    "mem_align": "iomem_align",
}

# Options that belong to an I/O engine (fio 3.33 engines/*.c, each engine's `.options`). fio parses
# them only after loading the section's ioengine, and an option of another engine is its "Bad option".
# tests/fio/test_fio_crosscheck.py holds these against `fio --enghelp=ENGINE` for every engine the
# installed fio has.
_CMDPRIO = "cmdprio_percentage cmdprio_class cmdprio cmdprio_bssplit"
_URING = f"hipri {_CMDPRIO} fixedbufs registerfiles sqthread_poll sqthread_poll_cpu nonvectored uncached nowait force_async cmd_type"
_NET = "hostname port protocol proto nodelay listen pingpong interface ttl window_size mss"
_RPMA = "serverip port direct_write_to_pmem busy_wait_polling"
ENGINE_OPTIONS = {name: set(names.split()) for name, names in {
    "libaio": f"userspace_reap {_CMDPRIO} nowait",
    "io_uring": _URING, "io_uring_cmd": _URING,
    "pvsync2": "hipri hipri_percentage uncached nowait",
    "sg": "hipri readfua writefua sg_write_mode stream_id",
    "net": _NET, "netsplice": _NET,
    "mmap": "thp",
    "cpuio": "cpuload cpumode cpuchunks exit_on_io_done",
    "exec": "program arguments grace_time std_redirect",
    "e4defrag": "donorname inplace",
    "filestat": "stat_type",
    "gfapi": "volume brick single-instance", "gfapi_async": "volume brick single-instance",
    "http": """https http_host http_user http_pass http_s3_key http_s3_keyid http_swift_auth_token
        http_s3_region http_s3_sse_customer_key http_s3_sse_customer_algorithm http_s3_storage_class
        http_mode http_verbose""",
    "libcufile": "gpu_dev_ids cuda_io",
    "libhdfs": "namenode hostname port hdfsdirectory chunk_size chunck_size single_instance hdfs_use_direct",
    "libiscsi": "initiator",
    "librpma_apm_client": _RPMA, "librpma_apm_server": _RPMA,
    "librpma_gpspm_client": _RPMA, "librpma_gpspm_server": _RPMA,
    "mtd": "skip_bad",
    "nbd": "uri",
    "nfs": "nfs_url",
    "rados": "clustername pool clientname conf busy_poll touch_objects",
    "rbd": "clustername rbdname pool clientname busy_poll",
    "rdma": "hostname bindname port verb proto",
    "dfs": "pool cont chunk_size object_class svcl",
    "xnvme": "hipri sqthread_poll xnvme_be xnvme_async xnvme_sync xnvme_admin xnvme_dev_nsid xnvme_iovec",
    "windowsaio": "no_completion_thread",
}.items()}
ENGINE_ONLY = set().union(*ENGINE_OPTIONS.values())   # none of them is in fio's own table

# Options of fio's built-in profiles (profiles/act.c, profiles/tiobench.c): registered into fio's
# option table at start-up, so fio accepts them in any job; iodl emulates no profile.
PROFILE_OPTIONS = {
    "act": set("device-names load test-duration threads-per-queue read-req-num-512-blocks large-block-op-kbytes prep".split()),
    "tiobench": set("size block numruns dir threads".split()),
}

# fio parses a section's options sorted by priority (options.c .prio), stably: kb_base first, so it
# governs the sizes of its own section wherever it is written; filename/filename_format last.
PRIO = {"kb_base": 1, "unit_base": 1, "cpus_allowed_policy": 1, "lockfile": 1, "filename": -1, "filename_format": -1}

# What iodl reproduces (reads, and sequential writes with their syncs). Everything else fio knows
# is rejected by name.
HONOURED = set("""
    name directory filename filename_format unique_filename nrfiles size filesize io_size offset offset_increment number_ios
    loops numjobs rw rw_sequencer bs bsrange bssplit ba randrepeat randseed allrandrepeat norandommap random_generator
    file_service_type time_based runtime ramp_time startdelay ioengine iodepth iodepth_batch direct buffered invalidate
    iodepth_batch_complete_min iodepth_batch_complete_max
    rate rate_iops rate_process create_serialize create_on_open create_only allow_file_create fallocate overwrite
    stonewall new_group group_reporting kb_base thread
    fsync fdatasync end_fsync fsync_on_close
    rwmixread rwmixwrite percentage_random random_distribution
    buffer_compress_percentage buffer_compress_chunk dedupe_percentage dedupe_mode buffer_pattern zero_buffers
    refill_buffers scramble_buffers
    write_bw_log write_lat_log write_iops_log log_avg_msec log_offset per_job_logs
    userspace_reap fixedbufs unlink_each_loop
""".split())

# Honoured only in write jobs (fio does no sync in a job that does not write: should_fsync).
WRITE_ONLY = {"fsync", "fdatasync", "end_fsync", "fsync_on_close"}

# fio 3.33's default of every option in its own table: `fio --cmdhelp=NAME`, its "default:" line
# ("name=" where it says "no default": the option's field starts zeroed, so 0 for a number or a
# switch, unset for a string). tests/fio/test_defaults.py holds this table to the installed fio
# and runs every option at its default through iodl's checks.
_DEFAULTS_TEXT = """
    allow_file_create=1 allow_mounted_write=0 allrandrepeat=0 atomic=0 ba= block_error_percentiles=0 bs=4096
    bs_is_seq_rand=0 bs_unaligned= bsrange= bssplit= buffer_compress_chunk=512 buffer_compress_percentage=
    buffer_pattern= buffered=1 bwavgtime=500 cgroup= cgroup_nodelete=0 cgroup_weight= clat_percentiles=1
    clocksource= continue_on_error=none cpumask= cpus_allowed= cpus_allowed_policy= create_fsync=1
    create_on_open=0 create_only=0 create_serialize=1 dedupe_global=0 dedupe_mode=repeat dedupe_percentage=
    dedupe_working_set_percentage=5 description= direct=0 directory= disable_bw_measurement=0 disable_clat=0
    disable_lat=0 disable_slat=0 disk_util=1 do_verify=1 end_fsync=0 error_dump=0 exec_postrun= exec_prerun=
    exit_what=group exitall= exitall_on_error= experimental_verify= fadvise_hint=1 fallocate=native fdatasync=0
    file_append=0 file_service_type=roundrobin filename= filename_format=$jobname.$jobnum.$filenum filesize=
    fill_device=0 flow=0 flow_id=0 flow_sleep=0 fsync=0 fsync_on_close=0 gid= group_reporting= gtod_cpu=
    gtod_reduce=0 hugepage-size=2097152 ignore_error= ignore_zone_limits=0 invalidate=1 io_size=
    io_submit_mode=inline iodepth=1 iodepth_batch=1 iodepth_batch_complete_max= iodepth_batch_complete_min=1
    iodepth_low= ioengine=psync iomem_align=0 iopsavgtime=500 ioscheduler= job_max_open_zones=0 kb_base=1024
    lat_percentiles=0 latency_percentile=100 latency_run=0 latency_target= latency_window= lockfile=none
    lockmem=0 log_alternate_epoch= log_alternate_epoch_clock_id= log_avg_msec=0 log_compression=
    log_compression_cpus= log_entries=1024 log_hist_coarseness=0 log_hist_msec=0 log_max_value=0 log_offset=0
    log_prio=0 log_store_compressed= log_unix_epoch= loops=1 max_latency= max_open_zones=0 mem=malloc
    merge_blktrace_file= merge_blktrace_iters= merge_blktrace_scalars= name= new_group= nice=0 norandommap=
    nrfiles=1 numa_cpu_nodes= numa_mem_policy= number_ios=0 numjobs=1 offset=0 offset_align=0
    offset_increment=0 opendir= openfiles= overwrite=0 per_job_logs=1 percentage_random=100,100,100
    percentile_list=1:5:10:20:30:40:50:60:70:80:90:95:99:99.5:99.9:99.95:99.99 pre_read=0 prio= prioclass=
    profile= ramp_time= random_distribution=random random_generator=tausworthe randrepeat=1 randseed=0x89 rate=
    rate_cycle=1000 rate_ignore_thinktime= rate_iops= rate_iops_min= rate_min= rate_process=linear
    read_beyond_wp=0 read_iolog= read_iolog_chunked=0 refill_buffers= replay_align= replay_no_stall=0
    replay_redirect= replay_scale=1 replay_skip= replay_time_scale=100 runtime=0 rw=read
    rw_sequencer=sequential rwmixread=50 rwmixwrite=50 scramble_buffers=1 serialize_overlap=0
    significant_figures=4 size= slat_percentiles=0 softrandommap=0 startdelay=0 stats=1
    steadystate=iops_slope:0.01% steadystate_duration=0 steadystate_ramp_time=0 stonewall= sync=none
    sync_file_range= thinktime=0 thinktime_blocks=1 thinktime_blocks_type=complete thinktime_iotime=0
    thinktime_spin=0 thread= time_based= trim_backlog= trim_backlog_batch= trim_percentage=0 trim_verify_zero=1
    uid= unified_rw_reporting=none unique_filename=1 unit_base= unlink=0 unlink_each_loop=0 verify=0
    verify_async=0 verify_async_cpus= verify_backlog= verify_backlog_batch= verify_dump=0 verify_fatal=0
    verify_interval= verify_offset= verify_only= verify_pattern= verify_state_load= verify_state_save=1
    wait_for= write_barrier=0 write_bw_log= write_hint= write_hist_log= write_iolog= write_iops_log=
    write_lat_log= zero_buffers= zone_reset_frequency= zone_reset_threshold= zonecapacity=0 zonemode=none
    zonerange=0 zonesize=0 zoneskip=0
"""
DEFAULTS = {name: value for name, _, value in (t.partition("=") for t in _DEFAULTS_TEXT.split())}

# Accepted without effect on what iodl does, with the reason shown by `--verbose` and in the docs.
IGNORED = {
    "description": "text only",
    "sync": "O_SYNC/O_DSYNC: no effect on reads (a write job with sync= on is refused)",
    "unit_base": "only changes fio's printed units",
    "iodepth_low": "iodl's engine refills to iodepth at once",
    "openfiles": "iodl opens all of a worker's files",
    "fadvise_hint": "a hint; iodl issues none",
    "clocksource": "iodl uses CLOCK_MONOTONIC",
    "cpus_allowed": "CPU placement", "cpus_allowed_policy": "CPU placement", "cpumask": "CPU placement",
    "gtod_cpu": "timing thread",
    "clat_percentiles": "fio-compare always reports lat, slat and clat percentiles", "lat_percentiles": "statistics",
    "slat_percentiles": "statistics", "percentile_list": "iodl reports p50/p99/p99.9",
    "significant_figures": "statistics", "disable_bw_measurement": "statistics",
    "disable_lat": "fio measures no lat: fio-compare shows lat as not measured on both sides",
    "disable_clat": "fio measures no clat: fio-compare shows clat as not measured on both sides",
    "disable_slat": "fio measures no slat: fio-compare shows slat as not measured on both sides",
    "gtod_reduce": "fio measures no latency: fio-compare compares bandwidth and IOPS only",
    "exitall_on_error": "what happens on an I/O error; iodl's run ends at its first error (exit 1)",
    "continue_on_error": "what happens on an I/O error; iodl's run ends at its first error (exit 1)",
    "ignore_error": "what happens on an I/O error; iodl's run ends at its first error (exit 1)",
    "unlink": "after the run, iodl removes the files it laid out itself (fio is run with unlink=0)",
    "unified_rw_reporting": "reads only", "bwavgtime": "statistics", "iopsavgtime": "statistics",
    "stats": "statistics", "disk_util": "statistics",
    "create_fsync": "layout detail", "mem": "buffer allocation",
    "registerfiles": "engine tuning",
    "sqthread_poll_cpu": "engine tuning", "nonvectored": "engine tuning", "lockmem": "memory locking",
    "block_error_percentiles": "trim error statistics only", "error_dump": "error messages only",
}

CORE = set(TYPE) - ENGINE_ONLY   # fio's own option table (options.c), without aliases
PROFILE_ONLY = set().union(*PROFILE_OPTIONS.values()) - CORE
KNOWN = CORE | set(ALIASES) | PROFILE_ONLY | ENGINE_ONLY

# Engine options iodl honours or ignores when the job's ioengine has them (see IGNORED below);
# every other engine option is refused by name, with its engine.
ENGINE_HONOURED: set = {"stat_type"}   # filestat: stat, lstat or statx per file (run.py META_ENGINES)


def canonical(key: str) -> str | None:
    """fio's name for `key` in its own table (resolving aliases; profile options included), or None:
    then it is an engine option (see engine_owners) or unknown to fio."""
    if key in CORE or key in PROFILE_ONLY:
        return key
    return ALIASES.get(key)


def engine_owners(key: str) -> list[str]:
    """The fio engines that have option `key`."""
    return sorted(e for e, names in ENGINE_OPTIONS.items() if key in names)


def profile_of(key: str) -> str | None:
    return next((p for p, names in PROFILE_OPTIONS.items() if key in names), None) if key in PROFILE_ONLY else None


def did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, sorted(CORE | set(ALIASES)), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# Accepted when off (0, or bare where 0 is the default is impossible), refused when on: each changes
# what fio measures or reports, and iodl does not do it. Value -> why.
ONLY_OFF = {
    "hipri": "polled completions are not emulated", "sqthread_poll": "a kernel submission thread is not emulated",
    "nowait": "RWF_NOWAIT/IOCB_NOWAIT is not emulated", "uncached": "RWF_UNCACHED is not emulated",
    "force_async": "IOSQE_ASYNC is not emulated",
}

_WHY = [
    (("numa_",), "NUMA placement is not emulated"),
    (("verify", "do_verify", "experimental_verify", "trim_"), "verification and trims are not emulated (iodl reads)"),
    (("write_", "log_", "per_job_logs", "read_iolog", "replay_", "merge_blktrace"),
     "iolog replay, histogram and compressed logs are not emulated (iodl writes fio's bw, lat and iops logs)"),
    (("zone", "max_open_zones", "job_max_open_zones", "read_beyond_wp", "ignore_zone_limits"), "zoned devices are not emulated"),
    (("thinktime",), "think time is not emulated"),
    (("exec_",), "iodl runs no commands"),
    (("flow",), "flow control between jobs is not emulated"),
    (("steadystate", "ss"), "steady-state detection is not emulated"),
    (("latency_", "max_latency"), "latency targets are not emulated"),
    (("cgroup",), "cgroups are not emulated"),
    (("prio", "nice"), "process and I/O priorities are not emulated"),
    (("rwmix", "sync_file_range", "write_barrier", "fill_device", "file_append", "buffer_", "dedupe",
      "scramble", "zero_buffers", "refill_buffers", "trim", "pre_read"),
     "iodl reads and writes with fsync/fdatasync only (no trims, range syncs, barriers or dedupe working sets)"),
]


def why(name: str) -> str:
    """Why iodl cannot honour option `name` that fio knows (one phrase)."""
    owners = engine_owners(name)
    if owners:
        return f"an option of ioengine {', '.join(owners)} that iodl does not emulate"
    profile = profile_of(name)
    if profile:
        return f"an option of fio's {profile} profile; iodl runs no profiles"
    if name == "profile":
        return "fio's built-in profiles are not emulated"
    for prefixes, reason in _WHY:
        if name.startswith(prefixes):
            return reason
    return "not emulated by iodl (see docs/fio-compare.md)"
