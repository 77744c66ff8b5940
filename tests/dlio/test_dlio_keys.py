"""Every key a DLIO version reads has a stance in iodl's key table (iodl/dlio.py KEYS).

The lists in tests/dlio/data are each DLIO version's own LoadConfig keys, made by
bench/dlio_config_keys.py from that version's utils/config.py (the header names repository@commit),
and the overrides MLPerf's mlpstorage sets. A key that appears in a new list and that iodl does not
know fails here, not in a user's run."""
import glob
import os
import re
import subprocess
import sys

import pytest

from iodl import dlio
from tests.conftest import require_or_skip

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench")
sys.path.insert(0, BENCH)
import dlio_config_keys  # noqa: E402  (bench/ is scripts, not a package)

LISTS = sorted(glob.glob(os.path.join(DATA, "*.keys")))
# the DLIO versions of MLPerf Storage v0.5 and v1.0 (and PyPI's 2.0.0, their release)
LEGACY_LISTS = ("dlio-v0.5-60782fe.keys", "dlio-v1.0-bc693c6.keys", "dlio-v1.0.1-2fcdbfa.keys", "dlio-2.0.0-pypi.keys")


def _read(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    return [l for l in lines if l.startswith("#")], [l for l in lines if l and not l.startswith("#")]


def _all_keys(names=None):
    return {k for p in LISTS if names is None or os.path.basename(p) in names for k in _read(p)[1]}


def test_the_lists_name_their_source():
    assert len(LISTS) >= 10
    for path in LISTS:
        header, keys = _read(path)
        assert re.match(r"# [\w.-]+/[\w.-]+@[0-9a-f]{40} [\w/.]+\.py$", header[0]), (path, header[0])
        assert keys == sorted(set(keys)) and len(keys) >= 15, path


@pytest.mark.parametrize("path", LISTS, ids=os.path.basename)
def test_every_key_dlio_reads_has_a_stance(path):
    missing = [k for k in _read(path)[1] if dlio.stance(k) is None]
    assert not missing, f"{os.path.basename(path)}: keys DLIO reads that iodl's table does not know: {missing}"


def test_default_is_said_only_of_keys_no_dlio_reads():
    """'DLIO would silently use its default here' (iodl's words for an unknown key, and NOREAD)
    is true only of a key that no DLIO version reads; and a key in iodl's table that no list has
    must say that no DLIO reads it (or be mlpstorage's)."""
    read = _all_keys()
    for section, rules in dlio.KEYS.items():
        for key, rule in rules.items():
            dotted = f"{section}.{key}"
            in_a_list = dotted in read or any(k.startswith(dotted + ".") for k in read)
            if "default here" in rule.why:
                assert not in_a_list, (dotted, rule.why)
            if not in_a_list:
                assert rule.why.startswith("no DLIO version reads it") or "no DLIO version reads it" in rule.why, \
                    (dotted, rule.why)


def test_the_legacy_keys_are_those_only_dlio_2_0_0_and_before_read():
    legacy, later = _all_keys(LEGACY_LISTS), _all_keys(set(map(os.path.basename, LISTS)) - set(LEGACY_LISTS))
    assert legacy - later == dlio._LEGACY_KEYS


def test_the_script_reads_loadconfig_as_dlio_writes_it(tmp_path):
    # DLIO's shapes: `'k' in config['s']`, config['s']['k'], an alias for two section names, a nested
    # mapping, a write into a copy (not a key), a .get
    src = '''
def LoadConfig(args, config):
    if 'framework' in config:
        args.framework = config['framework']
    reader = None
    if 'data_reader' in config:
        reader = config['data_reader']
    elif 'reader' in config:
        reader = config['reader']
    if reader is not None:
        if 'odirect' in reader:
            args.odirect = reader['odirect']
        t = {}
        if 'preprocess_time' in reader:
            t = reader['preprocess_time']
            t["mean"] = 1
    if 'model' in config:
        if 'parallelism' in config['model']:
            args.tp = config['model']['parallelism']['tensor']
        args.size = config['model'].get('model_size_bytes')
'''
    assert dlio_config_keys.keys_of(src) == [
        "data_reader.odirect", "data_reader.preprocess_time", "framework", "model.model_size_bytes",
        "model.parallelism.tensor", "reader.odirect", "reader.preprocess_time"]
    mlps = "class B:\n    def f(self):\n        if 'dataset.skip_listing' not in self.params_dict:\n" \
           "            self.params_dict['dataset.skip_listing'] = 'True'\n        self.params_dict['checkpoint.mode'] = 1\n"
    assert dlio_config_keys.mlpstorage_keys_of(mlps) == ["checkpoint.mode", "dataset.skip_listing"]


GIT_DIRS = {"argonne-lcf/dlio_benchmark": os.environ.get("IODL_DLIO_GIT", ""),
            "mlcommons/DLIO_local_changes": os.environ.get("IODL_DLIO_FORK_GIT", "")}


@pytest.mark.parametrize("path", [p for p in LISTS if "mlpstorage" not in p and "1830136" not in p],
                         ids=os.path.basename)
def test_a_list_is_what_the_script_prints_from_that_commit(path):
    """With a DLIO git directory (IODL_DLIO_GIT, IODL_DLIO_FORK_GIT), the committed list is the
    script's output at the commit its header names."""
    header, keys = _read(path)
    repo, sha = re.match(r"# ([\w.-]+/[\w.-]+)@([0-9a-f]{40})", header[0]).groups()
    git_dir = GIT_DIRS.get(repo)
    if not git_dir or not os.path.isdir(git_dir):
        require_or_skip("dlio-src", False, f"no git directory of {repo} (set {'IODL_DLIO_GIT' if 'argonne' in repo else 'IODL_DLIO_FORK_GIT'})")
    out = subprocess.run([sys.executable, os.path.join(BENCH, "dlio_config_keys.py"), "--git-dir", git_dir,
                          "--commit", sha, "--repo", repo], capture_output=True, text=True, check=True).stdout
    assert [l for l in out.splitlines() if not l.startswith("#")] == keys
