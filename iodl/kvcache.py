"""`iodl kvcache`: MLPerf Storage v3.0's LLM-inference KV-cache workload (docs/kvcache.md).

This module holds what a run is made of, resolved once before any I/O: the models and their KV
bytes per token, MLPerf's three options, the user types, and the knobs over them. The per-rank
generator is iodl/patterns/kvcache.py; the command is iodl/cmd/kvcache.py.

The shapes and rules are those of MLPerf's reference generator (kv-cache.py in mlcommons/storage,
kv_cache_benchmark/): an entry is one file of context x bytes per token plus a small header.
"""
from __future__ import annotations

import math
import os

from . import engines, limits
from .errors import UsageError
from .records import record
from .units import parse_size

FP16 = 2


@record(frozen=True)
class Model:
    name: str
    layers: int
    kv_heads: int = 0          # GQA/MHA
    head_dim: int = 0
    kv_lora_rank: int = 0      # MLA (deepseek-v3): a compressed latent per layer instead of K and V per head
    rope_dim: int = 0
    dtype_bytes: int = FP16

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token adds to an entry: K and V of every layer and KV head; MLA stores one
        latent of kv_lora_rank + rope_dim values per layer."""
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + self.rope_dim) * self.dtype_bytes
        return self.layers * self.kv_heads * self.head_dim * 2 * self.dtype_bytes


# the models kv-cache.py knows, by its names; all fp16 as there
MODELS: dict[str, Model] = {m.name: m for m in (
    Model("tiny-1b", layers=12, kv_heads=4, head_dim=128),
    Model("llama3.1-8b", layers=32, kv_heads=8, head_dim=128),
    Model("llama3.1-70b-instruct", layers=80, kv_heads=8, head_dim=128),
    Model("llama2-7b", layers=32, kv_heads=32, head_dim=128),
    Model("mistral-7b", layers=32, kv_heads=8, head_dim=128),
    Model("qwen3-32b", layers=64, kv_heads=8, head_dim=128),
    Model("gpt-oss-120b", layers=36, kv_heads=8, head_dim=64),
    Model("gpt-oss-20b", layers=24, kv_heads=8, head_dim=64),
    Model("deepseek-v3", layers=61, kv_lora_rank=512, rope_dim=64),
)}

# np.save's header in front of each entry's array (kv-cache.py writes .npy files): magic, version,
# length and the dict of dtype and shape, padded so the array starts at a multiple of 64
HEADER_BYTES = 128


@record(frozen=True)
class Option:
    model: str
    users: int                 # per rank
    cpu_memory_gb: float       # the CPU tier in front of the storage, GiB (0: none)
    max_concurrent_writes: int
    duration_s: float = 300.0


# MLPerf Storage v3.0's CLOSED options (mlpstorage's kvcache benchmark and Rules.md)
OPTIONS: dict[int, Option] = {
    1: Option("llama3.1-8b", users=200, cpu_memory_gb=0, max_concurrent_writes=16),
    2: Option("llama3.1-8b", users=100, cpu_memory_gb=4, max_concurrent_writes=16),
    3: Option("llama3.1-70b-instruct", users=70, cpu_memory_gb=0, max_concurrent_writes=4),
}


@record(frozen=True)
class UserType:
    name: str
    context: tuple[int, int]       # tokens: a user's own context is drawn from it once
    generation: tuple[int, int]    # tokens
    think_s: tuple[float, float]   # seconds between a user's requests


USER_TYPES = (
    UserType("chatbot", (512, 4096), (50, 200), (0.1, 0.5)),
    UserType("coding", (4096, 25000), (100, 500), (0.2, 1.0)),
    UserType("document", (4096, 16384), (200, 800), (0.3, 1.5)),
)
# QoS classes: (name, priority in the queue, share of users)
QOS = (("interactive", 3, 0.15), ("responsive", 2, 0.35), ("batch", 1, 0.50))

PREFILL_ONLY_TOKENS = 10_000   # a request with this much context or more only writes its entry
TOKENS_PER_DECODE_READ = 32    # decode reads the entry again once per 32 generated tokens
END_TURN_P = 0.2               # a conversation ends after a turn with this probability
MAX_TURNS = 50
STORAGE_SHARE = 0.95           # the entries may fill this share of the root's free space at start
MAX_WORKERS = 500              # kv-cache.py's threads per process: min(users, 500)


def decode_reads(generation: int) -> int:
    """Reads of the entry while generating: one, then one per 32 tokens (kv-cache.py's decode)."""
    return 1 + math.ceil(generation / TOKENS_PER_DECODE_READ)


def entry_bytes(tokens: int, bytes_per_token: int) -> int:
    """An entry's file size: the KV of its context plus the header."""
    return tokens * bytes_per_token + HEADER_BYTES


@record(frozen=True, kw_only=True)
class KVSpec:
    """What every rank of a kvcache run runs (resolve())."""
    option: int | None
    model: Model
    bytes_per_token: int       # the model's, or --bytes-per-token's (a model of one's own)
    users: int
    duration_s: float
    trials: int
    seed: int
    cpu_memory_gb: float
    max_concurrent_writes: int
    workers: int
    multi_turn: bool
    prefill_only: bool         # every request only writes (the bytes-per-token check)
    context: tuple[int, int] | None   # overrides every user type's context range (a model of one's own)
    max_requests: int          # per rank; 0: the duration alone ends the run
    engine: str
    direct: bool
    block_size: int
    root: str


def parse_range(flag: str, text: str) -> tuple[int, int]:
    """MIN:MAX (or one number) of tokens."""
    try:
        lo, _, hi = text.partition(":")
        lo_i, hi_i = int(lo), int(hi or lo)
    except ValueError:
        raise UsageError(f"{flag} {text}: give MIN:MAX tokens (e.g. 4096:16384) or one number") from None
    if not 1 <= lo_i <= hi_i <= 1 << 24:
        raise UsageError(f"{flag} {text}: need 1 <= MIN <= MAX <= {1 << 24:,}")
    return lo_i, hi_i


def resolve(args) -> KVSpec:
    """The run the options ask for: an --option's settings, each knob given over them."""
    option = OPTIONS[args.option] if args.option else None
    model_name = args.model or (option.model if option else None)
    if model_name is None:
        raise UsageError("give --option 1|2|3, or --model NAME with the knobs for a run of one's own")
    if model_name not in MODELS:
        raise UsageError(f"--model {model_name}: unknown (choose from {', '.join(MODELS)})")

    def pick(value, from_option, default):
        return value if value is not None else (from_option if option else default)

    users = pick(args.users, option and option.users, 100)
    limits.check_range("--users", users, 1, 100_000, integer=True)
    cpu_gb = pick(args.cpu_memory_gb, option and option.cpu_memory_gb, 0.0)
    limits.check_range("--cpu-memory-gb", cpu_gb, 0, 1 << 20)
    writes = pick(args.max_concurrent_writes, option and option.max_concurrent_writes, 16)
    limits.check_range("--max-concurrent-writes", writes, 1, MAX_WORKERS, integer=True)
    duration = pick(args.duration, option and option.duration_s, 300.0)
    limits.check_range("--duration", duration, 0.1, limits.MAX_SECONDS)
    workers = min(users, MAX_WORKERS) if args.workers is None else args.workers
    limits.check_range("--workers", workers, 1, MAX_WORKERS, integer=True)
    block = parse_size(args.block_size, "--block-size")
    limits.check_range("--block-size", block, 4096, limits.MAX_BLOCK_SIZE, integer=True)
    limits.check_block_size("--block-size", block, args.direct)
    bpt = MODELS[model_name].bytes_per_token if args.bytes_per_token is None else args.bytes_per_token
    limits.check_range("--bytes-per-token", bpt, 1, 1 << 30, integer=True)
    limits.check_range("--trials", args.trials, 1, 100, integer=True)
    limits.check_range("--max-requests", args.max_requests, 0, 1 << 40, integer=True)
    engine = engines.choose(args.engine, args.direct, writes=True)
    # every worker has an engine of its own, one request in flight: a worker is one of
    # kv-cache.py's threads, whose np.save and np.load each issue one request at a time
    limits.check_memory(f"--workers {workers} x --block-size {block}", limits.buffers_bytes(workers, block))
    return KVSpec(option=args.option, model=MODELS[model_name], bytes_per_token=bpt, users=users, duration_s=float(duration),
                  trials=args.trials, seed=args.seed, cpu_memory_gb=cpu_gb, max_concurrent_writes=writes,
                  workers=workers, multi_turn=not args.no_multi_turn, prefill_only=args.prefill_only,
                  context=parse_range("--context", args.context) if args.context else None,
                  max_requests=args.max_requests, engine=engine, direct=args.direct, block_size=block,
                  root=os.path.abspath(args.root))
