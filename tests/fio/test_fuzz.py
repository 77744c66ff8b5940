"""Whatever the text, the parser and the job checks raise iodl's parse error or nothing else."""
from hypothesis import given, settings
from hypothesis import strategies as st

from iodl.fio import jobfile as jf
from iodl.fio import options as opts
from iodl.fio.run import plan_job

KW = {"$pagesize": "4096", "$mb_memory": "1000", "$ncpus": "2"}
NAMES = sorted(opts.KNOWN) + ["include", "bogus"]
VALUES = st.one_of(
    st.text(alphabet="0123456789kKmMgGiIbB%xX:-,/.;#$ {}()s", max_size=12),
    st.sampled_from(["read", "randread", "write", "libaio", "roundrobin:2", "random", "1000", "1024", "4k/50:8k/"]),
    st.text(max_size=8),
)
LINE = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(NAMES), VALUES),
    st.sampled_from(NAMES),
    st.builds(lambda n: f"[{n}]", st.sampled_from(["global", "a", "b", "global-x", ""])),
    st.text(max_size=20),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(LINE, max_size=12))
def test_parser_raises_only_its_own_error(lines):
    text = "\n".join(lines)
    try:
        for job in jf.parse("/nonexistent/fuzz.fio", text, env={"X": "4k"}, keywords=KW):
            job.values.setdefault("directory", "/nonexistent")
            plan_job(job)
    except jf.JobFileError as exc:
        assert "\n" not in str(exc)
