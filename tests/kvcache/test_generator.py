"""The per-rank generator: users and their requests as kv-cache.py draws them, the root iodl owns,
the entries' LRU, and one rank's run in-process against the files it leaves (their sizes on disk
are the truth for the bytes it says it wrote)."""
import argparse
import os
import random
import statistics

import numpy as np
import pytest

from iodl import _native
from iodl.errors import UsageError
from iodl.kvcache import HEADER_BYTES, MODELS, PREFILL_ONLY_TOKENS, USER_TYPES, resolve
from iodl.patterns.kvcache import (MARK, SUFFIX, Arrivals, Entries, RankRun, make_users, prepare_root,
                                   rank_directory, read_plan, write_plan)
from iodl.plan import OP_FSYNC, OP_WRITE


def _args(root, **over):
    base = dict(root=str(root), option=None, model="tiny-1b", bytes_per_token=None, users=4, duration=2.0, trials=1, seed=42,
                cpu_memory_gb=None, max_concurrent_writes=None, workers=None, context=None, no_multi_turn=False,
                prefill_only=False, max_requests=0, engine="psync", direct=False, block_size="1MiB")
    base.update(over)
    return argparse.Namespace(**base)


def test_users_draw_their_ranges_from_their_type_and_the_qos_mix_is_mlperfs(tmp_path):
    spec = resolve(_args(tmp_path, users=20_000))
    users = make_users(spec, random.Random(1))
    types = {t.name: t for t in USER_TYPES}
    for u in users:
        t = types[u.kind]
        assert t.context[0] <= u.context <= t.context[1]
        assert t.generation[0] <= u.generation <= t.generation[1]
        assert t.think_s[0] <= u.think_s <= t.think_s[1]
    share = {p: sum(u.priority == p for u in users) / len(users) for p in (3, 2, 1)}
    # 20,000 draws: each share within 0.015 of MLPerf's 15/35/50 (over 4 standard errors)
    assert share[3] == pytest.approx(0.15, abs=0.015) and share[2] == pytest.approx(0.35, abs=0.015)
    assert {u.kind for u in users} == set(types)


def test_requests_arrive_open_loop_with_their_tokens_drawn_from_a_quarter_to_the_whole(tmp_path):
    spec = resolve(_args(tmp_path, users=50))
    rng = random.Random(7)
    users = make_users(spec, rng)
    arrivals = Arrivals(users, rng)
    reqs = [arrivals.next() for _ in range(20_000)]
    assert all(a.at_s <= b.at_s for a, b in zip(reqs, reqs[1:]))
    last: dict[int, float] = {}
    turns: dict[tuple, int] = {}
    for r in reqs:
        u = users[r.user]
        assert max(1, u.context // 4) <= r.context <= u.context
        assert max(1, u.generation // 4) <= r.generation <= u.generation
        if r.user in last:   # the next one a think time x U(0.8, 1.2) after the last, done or not
            assert 0.8 * u.think_s - 1e-9 <= r.at_s - last[r.user] <= 1.2 * u.think_s + 1e-9
        last[r.user] = r.at_s
        key = (r.user, r.conversation)
        assert r.turn == turns.get(key, -1) + 1   # turns in order, a new conversation from turn 0
        turns[key] = r.turn
    lengths = [n + 1 for (user, conv), n in turns.items() if (user, conv + 1) in turns]
    # ending with probability 0.2 after each turn: 5 turns on average (geometric), never past 50
    assert statistics.mean(lengths) == pytest.approx(5.0, rel=0.08) and max(lengths) <= 50


def test_long_contexts_are_prefill_only(tmp_path):
    spec = resolve(_args(tmp_path, users=200, model="llama3.1-8b"))
    rng = random.Random(3)
    arrivals = Arrivals(make_users(spec, rng), rng)
    reqs = [arrivals.next() for _ in range(2000)]
    assert any(r.prefill_only for r in reqs) and any(not r.prefill_only for r in reqs)
    assert all(r.prefill_only == (r.context >= PREFILL_ONLY_TOKENS) for r in reqs)


def test_a_write_plan_writes_the_whole_entry_then_fsyncs_it():
    size = 3 * (1 << 20) + 128
    plan = write_plan(size, 1 << 20)
    assert list(plan["op"]) == [OP_WRITE] * 4 + [OP_FSYNC]
    assert int(plan["length"][:-1].sum()) == size and list(plan["offset"][:-1]) == [0, 1 << 20, 2 << 20, 3 << 20]
    assert int(read_plan(size, 1 << 20)["length"].sum()) == size


def test_the_root_is_iodls_or_refused(tmp_path):
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match="did not write"):
        prepare_root(str(foreign))
    root = tmp_path / "kv"
    prepare_root(str(root))
    assert os.listdir(root) == [MARK]
    prepare_root(str(root))   # marked: taken as is
    d = rank_directory(str(root), 3)
    open(os.path.join(d, "u1-c0-t0" + SUFFIX), "w").close()
    open(os.path.join(d, "keep.txt"), "w").close()
    assert rank_directory(str(root), 3) == d
    assert os.listdir(d) == ["keep.txt"]   # an earlier run's entries go, nothing else


def test_entries_unlink_the_least_recently_used_to_make_room(tmp_path):
    e = Entries(str(tmp_path), capacity=300)
    for key in ("a", "b", "c"):
        assert e.reserve(100) == 0
        os.close(e.create(key, False))
        e.stored(key, 100)
    assert e.lookup("a") is not None          # a is now the most recently used
    assert e.reserve(100) == 1                # b goes
    assert sorted(os.listdir(tmp_path)) == ["a" + SUFFIX, "c" + SUFFIX]
    assert e.lookup("b") is None
    e.close()


@pytest.mark.parametrize("own_bpt", [None, 4096], ids=["tiny-1b", "bytes-per-token-4096"])
def test_a_rank_says_what_it_wrote_and_read_and_the_files_agree(tmp_path, own_bpt):
    """In-process, tiny-1b (or a model of one's own, 4,096 B/token), 6 users, 30 requests: the bytes
    written are the entries' sizes on disk, prefill tokens x bytes per token + a header per entry;
    every decode read is whole; the tokens are those of the 30 requests the rank's seed draws first
    (MLPerf's: their generation tokens only)."""
    root = tmp_path / "kv"
    spec = resolve(_args(root, users=6, duration=60.0, context="300:3000", max_requests=30, no_multi_turn=True,
                         bytes_per_token=own_bpt))
    prepare_root(spec.root)
    directory = rank_directory(spec.root, 0)
    entries = Entries(directory, 1 << 40)
    tally, end_s, partial = RankRun(spec, 0, entries, _native.monotonic_ns()).run(lambda: False)
    entries.close()
    sizes = [os.stat(os.path.join(directory, n)).st_size for n in os.listdir(directory)]
    bpt = own_bpt or MODELS["tiny-1b"].bytes_per_token
    assert spec.bytes_per_token == bpt
    assert not partial and tally.errors == 0 and tally.requests == 30 and 0 < end_s < 60
    rng = random.Random(spec.seed)
    arrivals = Arrivals(make_users(spec, rng), rng)
    drawn = [arrivals.next() for _ in range(30)]
    assert tally.generated_tokens == sum(r.generation for r in drawn)
    assert tally.tokens == sum(r.context + r.generation * (not r.prefill_only) for r in drawn)
    assert tally.entries_written == len(sizes) == 30
    assert tally.written_bytes == sum(sizes) == tally.prefill_tokens * bpt + 30 * HEADER_BYTES
    assert tally.fsyncs == 30 and int(tally.fsync_hist.sum()) == 30
    assert tally.entry_reads == tally.hits and tally.misses == 0
    # each entry is read 1 + ceil(gen / 32) >= 2 times, whole
    assert tally.entry_reads >= 60 and tally.read_bytes >= 2 * tally.written_bytes
    assert int(tally.read_hist.sum()) == tally.read_ios and int(tally.write_hist.sum()) == tally.write_ios
    assert int(tally.entry_read_hist.sum()) == tally.entry_reads


def test_resolve_refuses_what_is_not_built_and_names_the_choices(tmp_path):
    with pytest.raises(UsageError, match="choose from"):
        resolve(_args(tmp_path, model="gpt-5"))
    two = resolve(_args(tmp_path, option=2, model=None, users=None, duration=None))
    assert (two.model.name, two.users, two.cpu_memory_gb, two.max_concurrent_writes) == ("llama3.1-8b", 100, 4, 16)
    with pytest.raises(UsageError, match="MIN:MAX"):
        resolve(_args(tmp_path, context="a:b"))
    spec = resolve(_args(tmp_path, option=3, model=None, users=None, duration=None))
    assert (spec.model.name, spec.users, spec.max_concurrent_writes, spec.workers, spec.duration_s) == \
        ("llama3.1-70b-instruct", 70, 4, 70, 300.0)
    assert np.isclose(spec.model.bytes_per_token, 327_680)


def test_the_cpu_tier_keeps_entries_off_the_storage_until_it_demotes_them(tmp_path):
    """A 16 MiB CPU tier in front of the storage, tiny-1b entries of 4-30 MB: those over 95 % of
    the tier go to the storage directly; the rest stay in memory, kept at most 80 % full by demoting
    the least recently used: what reaches the files is exactly the demoted and too-large entries,
    and reads of entries in memory move no storage byte."""
    root = tmp_path / "kv"
    spec = resolve(_args(root, users=6, duration=60.0, context="600:1200", max_requests=40, no_multi_turn=True,
                         cpu_memory_gb=1 / 64))
    prepare_root(spec.root)
    directory = rank_directory(spec.root, 0)
    entries = Entries(directory, 1 << 40)
    run = RankRun(spec, 0, entries, _native.monotonic_ns())
    tally, _end_s, partial = run.run(lambda: False)
    entries.close()
    sizes = [os.stat(os.path.join(directory, n)).st_size for n in os.listdir(directory)]
    bpt = MODELS["tiny-1b"].bytes_per_token
    tier = run.cpu
    assert not partial and tally.requests == 40 and tally.errors == 0
    assert tally.cpu_entries > 0 and tally.demotions > 0 and tally.cpu_reads > 0
    # every request's entry went to exactly one tier; the storage holds the demoted and the too-large
    assert tally.cpu_entries + (tally.entries_written - tally.demotions) == 40
    assert tally.entries_written == len(sizes)
    assert tally.written_bytes == sum(sizes) == tally.prefill_tokens * bpt + len(sizes) * HEADER_BYTES
    # its bookkeeping is its entries; it may be over 80 % full only by entries that joined while the
    # demotions making their room were written (6 workers: at most 5 others), as kv-cache.py's tier
    assert tier.used == sum(tier.bytes_of(t) for t in tier.lru.values())
    assert tier.used <= tier.FILL * tier.capacity + 5 * max(sizes)
    assert not set(tier.lru) & {n[:-len(SUFFIX)] for n in os.listdir(directory)}   # never in both tiers
    # storage reads: whole entries of the storage only
    assert tally.entry_reads + tally.cpu_reads == tally.hits
    assert tally.read_bytes <= tally.entry_reads * max(sizes)
    assert any(s > 0.95 * tier.capacity for s in sizes)   # some went to the storage for being too large
