"""fio's job-file grammar on fake job files, with fio's code behaviour (not its HOWTO) as the spec."""
import pytest

from iodl.errors import UsageError
from iodl.fio import jobfile as jf
from iodl.fio.jobfile import JobFileError, Percent

KW = {"$pagesize": "4096", "$mb_memory": "1000", "$ncpus": "2"}


def parse(text, env=None, path="t.fio"):
    return jf.parse(path, text, env=env or {}, keywords=KW)


@pytest.mark.parametrize("text,kb1024,kb1000", [
    ("4k", 4096, 4000), ("4K", 4096, 4000), ("4kb", 4096, 4000), ("4ki", 4096, 4000),
    ("4kib", 4000, 4096), ("4KiB", 4000, 4096), ("1mi", 1 << 20, 10**6), ("1MiB", 10**6, 1 << 20),
    ("1g", 1 << 30, 10**9), ("1gib", 10**9, 1 << 30), ("64GiB", 64 * 10**9, 64 << 30),
    ("1024KiB", 1024000, 1 << 20), ("2t", 2 << 40, 2 * 10**12), ("512", 512, 512), ("512b", 512, 512),
    ("0x10", 16, 16), ("0x10k", 16, 16),  # the suffix scan stops at the x: fio ignores the k
])
def test_size_suffixes_follow_fios_code(text, kb1024, kb1000):
    assert jf.parse_size(text, 1024) == kb1024
    assert jf.parse_size(text, 1000) == kb1000


def test_percent_and_junk_follow_strtoll():
    assert jf.parse_size("20%") == Percent(20)
    assert jf.parse_size("12abc") == 12       # strtoll stops at the junk
    with pytest.raises(ValueError, match="not a number"):
        jf.parse_size("abc")                  # no digits: fio says "failed parsing bs=abc"
    with pytest.raises(ValueError):
        jf.parse_size("")                     # fio: "failed parsing" (what bs=${UNSET} becomes)


@pytest.mark.parametrize("text,us", [
    ("10", 10_000_000), ("10s", 10_000_000), ("1m", 60_000_000), ("2h", 7_200_000_000),
    ("1d", 86_400_000_000), ("1500ms", 1_500_000), ("250us", 250), ("10sec", 10),
])
def test_time_suffixes(text, us):
    assert jf.parse_time(text, seconds=True) == us


def test_thinktime_is_microseconds_bare():
    job = parse("[a]\nthinktime=10\n")[0]
    assert job.values["thinktime"] == 10


def test_reference_job_sizes():
    job = parse(open("workloads/fio/reference-job1.fio").read())[0]
    assert job.name == "job1"
    assert job.values["size"] == 68_719_476_736
    assert job.values["bs"] == [1 << 20] * 3
    assert job.values["rate_iops"] == [83] * 3
    assert job.values["runtime"] == 600_000_000 and job.values["ramp_time"] == 60_000_000
    assert job.values["numjobs"] == 8 and job.values["iodepth"] == 32 and job.values["nrfiles"] == 30


def test_without_kb_base_the_same_text_means_decimal():
    job = parse("[a]\nsize=64GiB\nbs=1024KiB\n")[0]
    assert job.values["size"] == 64 * 10**9 and job.values["bs"][0] == 1_024_000


def test_kb_base_applies_to_its_own_section_wherever_written():
    assert parse("[a]\nsize=1MiB\nkb_base=1000\n")[0].values["size"] == 1 << 20


def test_kb_base_does_not_reparse_earlier_globals():
    assert parse("[global]\nsize=1MiB\n[a]\nkb_base=1000\n")[0].values["size"] == 10**6
    assert parse("[global]\nkb_base=1000\n[a]\nsize=1MiB\n")[0].values["size"] == 1 << 20


def test_globals_apply_only_below_and_in_order():
    jobs = parse("[global]\nbs=4k\n[a]\n[global2]\nbs=8k\n[b]\n[global]\nbs=16k\n[c]\nbs=32k\n")
    assert [j.values["bs"][0] for j in jobs] == [4096, 8192, 32768]


def test_global_prefix_makes_a_section_global():
    jobs = parse("[global-x]\nbs=8k\n[a]\n")
    assert [j.name for j in jobs] == ["a"] and jobs[0].values["bs"][0] == 8192


def test_comments_full_line_and_inline():
    jobs = parse("; top\n# top\n[a]\n  ; indented\nbs=8k ; inline\nsize=1m# inline\n")
    assert jobs[0].values["bs"][0] == 8192 and jobs[0].values["size"] == 1 << 20


def test_spaces_around_equals_keep_fios_quirk():
    # fio accepts them, but its suffix scan stops at the blank: "bs = 8k" is 8 bytes (checked against fio)
    assert parse("[a]\nbs = 8k\nrw = randread\n")[0].values["bs"][0] == 8
    assert parse("[a]\nbs =8k\n")[0].values["bs"][0] == 8192


def test_rwt_split_bs_a_b_is_read_write_not_a_range():
    job = parse("[a]\nbs=4k-64k\nrate=1m,2m\nrate_iops=10:20\n")[0]
    assert job.values["bs"] == [4096, 65536, 65536]
    assert job.values["rate"] == [1 << 20, 2 << 20, 2 << 20]
    assert job.values["rate_iops"] == [10, 20, 20]


def test_ranges_swap_reversed_ends():
    job = parse("[a]\nbsrange=64k-4k\nfilesize=1k:8k\n")[0]
    assert job.values["bsrange"] == [(4096, 65536)]
    assert job.values["filesize"] == [(1024, 8192)]


def test_bssplit_blank_percentages_share_the_rest():
    job = parse("[a]\nbssplit=4k/10:64k/50:32k/:8k/\n")[0]
    assert job.values["bssplit"] == [[(4096, 10.0), (65536, 50.0), (32768, 20.0), (8192, 20.0)]]


def test_bssplit_over_100_is_an_error():
    with pytest.raises(JobFileError, match=r"more than 100.*t.fio:2"):
        parse("[a]\nbssplit=4k/60:8k/60\n")


def test_booleans_are_numbers_only():
    assert parse("[a]\ndirect=1\n")[0].values["direct"] == 1
    for bad in ("direct=true", "direct=2", "direct"):
        with pytest.raises(JobFileError, match=r"'direct'.*\(t.fio:2\)"):
            parse(f"[a]\n{bad}\n")


def test_str_set_options_may_be_bare():
    job = parse("[a]\ntime_based\ngroup_reporting\nthread=0\n")[0]
    assert job.values["time_based"] == 1 and job.values["group_reporting"] == 1 and job.values["thread"] == 0


def test_environment_variables_and_keywords():
    job = parse("[a]\nbs=${BS}\nnrfiles=$ncpus\nsize=$mb_memory\niodepth=${UNSET}4\n", env={"BS": "64k"})[0]
    assert job.values["bs"][0] == 65536 and job.values["nrfiles"] == 2
    assert job.values["size"] == 1000 and job.values["iodepth"] == 4


def test_undefined_variable_leaves_an_empty_value():
    with pytest.raises(JobFileError, match=r"bad value for 'bs'.*\(t.fio:2\)"):
        parse("[a]\nbs=${NOPE}\n")


def test_aliases_resolve():
    job = parse("[a]\nreadwrite=randread\nblocksize=8k\ntimeout=5\nnr_files=3\n")[0]
    assert job.values["rw"] == "randread" and job.values["bs"][0] == 8192
    assert job.values["runtime"] == 5_000_000 and job.values["nrfiles"] == 3


def test_include_applies_to_the_including_section(tmp_path):
    (tmp_path / "inc.fio").write_text("bs=16k\nrw=randread\n")
    main = tmp_path / "main.fio"
    main.write_text("[a]\ninclude inc.fio\n[b]\n")
    jobs = jf.parse(str(main), env={}, keywords=KW)
    assert jobs[0].values["bs"][0] == 16384 and "bs" not in jobs[1].values


def test_include_may_not_open_sections(tmp_path):
    (tmp_path / "inc.fio").write_text("[x]\n")
    main = tmp_path / "main.fio"
    main.write_text("[a]\ninclude inc.fio\n")
    with pytest.raises(JobFileError, match=r"no new sections.*inc.fio:1"):
        jf.parse(str(main), env={}, keywords=KW)


def test_missing_include_names_the_line(tmp_path):
    main = tmp_path / "main.fio"
    main.write_text("[a]\n\ninclude nope.fio\n")
    with pytest.raises(JobFileError, match=r"nope.fio.*main.fio:3"):
        jf.parse(str(main), env={}, keywords=KW)


def test_option_outside_a_section():
    with pytest.raises(JobFileError, match=r"outside of a \[job\] section \(t.fio:1\)"):
        parse("bs=4k\n[a]\n")


def test_unknown_option_gets_a_did_you_mean():
    with pytest.raises(JobFileError) as e:
        parse("[a]\n\niodpeth=32\n")
    assert str(e.value) == "unknown option 'iodpeth' in [a] (did you mean 'iodepth'?) (t.fio:3)"


def test_errors_are_usage_errors_one_line():
    with pytest.raises(UsageError) as e:
        parse("[a\n")
    assert "\n" not in str(e.value) and "t.fio:1" in str(e.value)


def test_arithmetic_is_rejected_as_fio_3_33_does():
    with pytest.raises(JobFileError, match="arithmetic"):
        parse("[a]\nbs=(4*1024)\n")
