"""The fio-examples fixes: keyword arithmetic, engine/profile options named, buffered vs direct,
zone sizes, backwards reads, statistics switches, and fio's one-completion-per-reap queue depth."""
import os

import numpy as np
import pytest

from iodl.fio import jobfile as jf
from iodl.fio import options as opts
from iodl.fio.compare import depth_row
from iodl.fio.jobfile import JobFileError, Zones
from iodl.fio.run import plan_job

KW = {"$pagesize": "4096", "$mb_memory": "24103", "$ncpus": "2"}


def parse(text):
    return jf.parse("t.fio", text, env={}, keywords=KW)


def plan(text):
    return plan_job(parse(text)[0], files=False)


@pytest.mark.parametrize("expr,value", [
    ("5*1024*1024*24103/8", "15796142080"), ("7/2", "3"), ("-7/2", "-3"), ("(1+2)*3", "9"),
    ("2^10", "1024"), ("-2^2", "4"), ("10%3", "1"), ("1.5*2", "3"), (" 4096 * 2 ", "8192"),
])
def test_bc_eval_as_bc_prints(expr, value):
    assert jf.bc_eval(expr) == value


@pytest.mark.parametrize("expr", ["4k*2", "2*", "(1+2", "x*2", "1/0", "2**3"])
def test_bc_eval_refuses_what_bc_cannot_read(expr):
    with pytest.raises(jf.BcError):
        jf.bc_eval(expr)


def test_arithmetic_after_a_keyword_is_evaluated():
    job = parse("[a]\nsize=5*1024*1024*$mb_memory/8\nnumjobs=$ncpus*2\nbs=$pagesize*256\n")[0]
    assert job.values["size"] == 15_796_142_080 and job.values["numjobs"] == 4
    assert job.values["bs"][0] == 1 << 20


def test_arithmetic_without_a_keyword_is_left_to_the_value_parser():
    # bc only runs after a keyword was replaced: "4*2" alone is strtoll's 4, as in fio
    assert parse("[a]\niodepth=4*2\n")[0].values["iodepth"] == 4
    assert parse("[a]\ndescription=$ncpus cpus\n")[0].values["description"] == "2 cpus"


def test_keyword_arithmetic_bc_cannot_read_is_one_line():
    with pytest.raises(JobFileError, match=r"cannot evaluate .*\(t.fio:2\)"):
        parse("[a]\nsize=$pagesize*4k\n")


def test_system_keywords_are_fios():
    kw = jf._system_keywords()
    assert kw["$ncpus"] == str(os.sysconf("SC_NPROCESSORS_CONF"))
    assert int(kw["$pagesize"]) == os.sysconf("SC_PAGE_SIZE") and int(kw["$mb_memory"]) > 0


def test_filesize_one_value_is_both_ends():
    assert parse("[a]\nfilesize=1G\n")[0].values["filesize"] == [(1 << 30, 1 << 30)]


def test_backwards_read_is_refused_not_a_crash():
    with pytest.raises(JobFileError, match=r"rw=read:-8k.*forwards only"):
        plan("[a]\nrw=read:-8k\nsize=64k\n")
    with pytest.raises(JobFileError, match=r"rw=randread:-2"):
        plan("[a]\nrw=randread:-2\nsize=64k\n")
    assert plan("[a]\nrw=read:8k\nsize=64k\n").seq_len == 8192


def test_engine_options_of_the_jobs_engine_are_named_with_a_reason():
    with pytest.raises(JobFileError) as e:
        plan("[a]\nioengine=libaio\ncmdprio_percentage=10\n")
    assert "unsupported option 'cmdprio_percentage' in [a]: an option of ioengine io_uring, io_uring_cmd, libaio" in str(e.value)
    assert "unknown" not in str(e.value)


def test_engine_option_of_another_engine_names_its_engines():
    with pytest.raises(JobFileError) as e:
        parse("[global]\ncmdprio=3\n[a]\nioengine=libaio\n")
    assert "'cmdprio' in [global] belongs to ioengine io_uring, io_uring_cmd, libaio, not to ioengine=psync" in str(e.value)


def test_the_engine_is_checked_before_its_options():
    with pytest.raises(JobFileError, match=r"unsupported value 'ioengine=rbd'"):
        plan("[global]\nioengine=rbd\nclientname=admin\npool=rbd\n[a]\nrw=read\n")


def test_profile_options_are_known():
    with pytest.raises(JobFileError, match=r"'threads'.*tiobench profile"):
        plan("[a]\nthreads=1\nrw=read\n")


def test_no_name_fio_knows_is_unknown():
    for name in sorted(opts.CORE | set(opts.ALIASES) | opts.PROFILE_ONLY):
        try:
            parse(f"[a]\n{name}=1\n")
        except JobFileError as exc:
            assert "unknown option" not in str(exc), name
    for engine, names in opts.ENGINE_OPTIONS.items():
        for name in names:
            try:
                parse(f"[a]\nioengine={engine}\n{name}=1\n")
            except JobFileError as exc:
                assert "unknown option" not in str(exc) and "belongs to" not in str(exc), (engine, name)


def test_unknown_names_still_get_a_did_you_mean():
    with pytest.raises(JobFileError, match=r"unknown option 'iodpeth' in \[a\] \(did you mean 'iodepth'\?\)"):
        parse("[a]\niodpeth=4\n")


def test_buffered_in_the_job_wins_over_direct_in_global():
    assert plan("[global]\ndirect=1\n[a]\nbuffered=1\n").direct is False
    assert plan("[global]\nbuffered=0\n[a]\n").direct is True
    assert plan("[global]\nbuffered=1\n[a]\ndirect=1\n").direct is True
    assert plan("[a]\ndirect=1\nbuffered=1\n").direct is False     # last in the section wins


def test_zone_sizes_are_zones_and_refused():
    assert parse("[a]\nsize=128z\n")[0].values["size"] == Zones(128)
    with pytest.raises(JobFileError, match="number of zones"):
        plan("[a]\nrw=read\nsize=128z\n")
    with pytest.raises(JobFileError, match="'z' suffix isn't applicable"):
        parse("[a]\nbs=4z\n")


# gtod_reduce=1 / disable_*lat=1 are accepted: latency "not measured" on both sides (tests/fio/test_jobs_people_have.py)
@pytest.mark.parametrize("line,reason", [("numa_cpu_nodes=0", "NUMA"), ("numa_mem_policy=local", "NUMA")])
def test_numa_switches_are_refused_not_ignored(line, reason):
    with pytest.raises(JobFileError, match=reason):
        plan(f"[a]\nrw=read\n{line}\n")


def test_statistics_switches_off_are_accepted():
    plan("[a]\nrw=read\ngtod_reduce=0\ndisable_slat=0\n")


def test_reap_batch_follows_fios_fixups():
    assert plan("[a]\nioengine=libaio\niodepth=16\n").reap_batch == 1
    assert plan("[a]\nioengine=libaio\niodepth=16\niodepth_batch_complete_min=4\n").reap_batch == 4
    assert plan("[a]\nioengine=libaio\niodepth=16\niodepth_batch_complete_max=8\n").reap_batch == 8


def test_depth_row_adds_to_100():
    assert depth_row({"1": 0.1, "2": 0.1, "4": 0.1, "8": 0.1, "16": 100.0, "32": 0.0, ">=64": 0.0}) == "16:100%"
    row = depth_row({"1": 0.0, "2": 49.2, "4": 30.3, "8": 20.5})
    assert row == "2:49% 4:30% 8:21%"
    assert sum(int(x.split(":")[1][:-1]) for x in row.split()) == 100
    assert depth_row(None) == "-" and depth_row({"1": 0.0}) == "-"


def test_engine_reaps_one_completion_per_call_keeps_the_queue_full():
    """fio reaps one completion per io_getevents and refills: every submit sees depth == iodepth
    once the queue is full. The null engine with a delay completes several at once; reap_batch=1
    takes them one by one, so (after the first fill) every request is in the 8 bucket."""
    from iodl import histogram
    from iodl.engine import as_plan
    from iodl.engines import open_engine

    rows = 2000
    planned = as_plan(np.column_stack([np.zeros(rows), np.arange(rows) * 4096, np.full(rows, 4096)]).astype(np.uint64))

    def depth(reap_batch):
        with open_engine("null", depth=8, block_size=4096, delay_ns=20_000, reap_batch=reap_batch) as e:
            stats = e.run([-1], planned, histogram.empty())
        return np.asarray(stats["depth"])

    one = depth(1)
    assert one.sum() == rows and one[3] >= rows - 8      # bucket "8": depth 8..15
    assert depth(0)[3] < one[3]                            # reaping all that is ready lets it drain
