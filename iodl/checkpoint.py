"""The checkpoint model: which files each rank writes, and how many bytes, in DLIO's arithmetic.

No I/O and no heavy imports here: `iodl checkpoint --plan` runs on a laptop for 1024 ranks, and a
checkpoint run takes each rank's files from rank_files(). docs/checkpoint.md explains the numbers.

Two kinds of model, as DLIO describes them (dlio_benchmark checkpointing/base_checkpointing.py):
- a transformer (`[model] num_layers, hidden_size, ffn_hidden_size, num_attention_heads,
  num_kv_heads, vocab_size`), split by tensor (TP) and pipeline (PP) parallelism and, with ZeRO
  stage 3, sharded over the data-parallel (DP) ranks; its optimizer state is sharded over every
  rank with ZeRO >= 1;
- a flat model of `[model] model_size` bytes (unet3d), written whole.

Ranks are numbered as DLIO numbers them: tensor rank = r % TP, pipeline rank = (r // TP) % PP,
model-parallel rank = r % (TP*PP), data-parallel rank = r // (TP*PP).
"""
from __future__ import annotations

from functools import lru_cache

from .errors import UsageError
from .records import record

# bytes per element of DLIO's datatypes
DATATYPES = {"int8": 1, "uint8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}
ZERO_STAGES = (0, 1, 2, 3)
# The files of a flat model, by the DLIO that wrote them. "dlio": DLIO since 2025 (upstream and the
# MLCommons fork). "dlio-1.0": DLIO 2.0.0 and before (MLPerf Storage v1.0's submodule 2fcdbfa4):
# rank 0 torch.saves the model, model_size int8 elements, and with DLIO's default num_layers 1 and
# layer_parameters [17371, 24740228] one layer file too. "dlio-0.5" (v0.5's submodule 60782fe7):
# rank 0 writes model_size bytes of "x" to one .bin file. Bytes are the tensors' (torch.save's few
# hundred bytes of zip framing are not counted), as for every layout.
LAYOUTS = ("dlio", "dlio-1.0", "dlio-0.5")
DLIO_1_0_LAYER_BYTES = 17371 + 24740228
EXT = "pt"            # DLIO's PyTorch checkpointing names its files NAME.pt


@record(frozen=True)
class ModelSpec:
    """[model]: a transformer's shape, or a flat model_size in bytes."""
    type: str = "transformer"
    num_layers: int = 0
    hidden_size: int = 0
    ffn_hidden_size: int = 0
    num_attention_heads: int = 0
    num_kv_heads: int = 0
    vocab_size: int = 0
    model_datatype: str = "fp16"
    optimizer_datatype: str = "fp32"
    model_size: int = 0           # bytes of a flat (non-transformer) model
    layout: str = "dlio"          # whose files: DLIO since 2025, or dlio-1.0 / dlio-0.5 (LAYOUTS)

    @property
    def is_transformer(self) -> bool:
        return self.num_layers > 0


@record(frozen=True)
class ParallelismSpec:
    """[parallelism]: TP, PP, the DP a full run has (0: ranks / (TP*PP)) and the ZeRO stage."""
    tensor: int = 1
    pipeline: int = 1
    data: int = 0
    zero_stage: int = 0

    @property
    def model_parallel(self) -> int:
        return self.tensor * self.pipeline


@record(frozen=True)
class CheckpointSpec:
    """[checkpoint]: how many checkpoints a checkpoint run writes and reads back, and when a
    training run checkpoints (every_steps > 0 wins over the epoch schedule, as in DLIO)."""
    writes: int = 10              # MLPerf Storage's num_checkpoints_write
    reads: int = 10               # MLPerf Storage's num_checkpoints_read
    fsync: bool = True            # fsync each file after writing it (MLPerf requires it)
    time_between_s: float = 0.0   # emulated compute before each checkpoint (DLIO time_between_checkpoints)
    every_steps: int = 0          # 0: checkpoint by epochs (DLIO steps_between_checkpoints)
    after_epoch: int = 1          # first epoch that ends with a checkpoint (DLIO checkpoint_after_epoch)
    every_epochs: int = 1         # epochs between checkpoints after that (DLIO epochs_between_checkpoints)


@record(frozen=True)
class CheckpointModel:
    """What rank_files() needs: the model and how it is split."""
    name: str
    model: ModelSpec
    parallelism: ParallelismSpec


def check_model(model: ModelSpec, par: ParallelismSpec) -> str | None:
    """The reason a model and its parallelism cannot be laid out (None if they can)."""
    if model.layout != "dlio" and model.is_transformer:
        return f"layout {model.layout} is a flat model's (DLIO 2.0.0 and before): give model_size, not num_layers"
    if model.num_layers and model.model_size:
        return "give either num_layers (a transformer) or model_size (a flat model), not both"
    if not model.num_layers and not model.model_size:
        return "give num_layers and the transformer's shape, or model_size in bytes"
    if model.is_transformer:
        if model.type != "transformer":
            return f"num_layers describes a transformer: type must be \"transformer\", got {model.type!r}"
        missing = [k for k in ("hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size")
                   if not getattr(model, k)]
        if missing:
            return f"a transformer needs {', '.join(missing)}"
        if model.num_layers < par.pipeline:
            return f"num_layers {model.num_layers} is fewer than the pipeline stages ({par.pipeline})"
        if model.hidden_size < model.num_attention_heads:
            return f"hidden_size {model.hidden_size} is smaller than num_attention_heads {model.num_attention_heads}"
    elif model.type == "transformer":
        return "a transformer is described by num_layers and its shape; a flat model_size needs another type " \
               "(e.g. type = \"cnn\")"
    if par.zero_stage == 3 and par.pipeline > 1:
        return "ZeRO stage 3 does not combine with pipeline parallelism (as in DLIO)"
    return None


@record(frozen=True)
class Layout:
    """A checkpoint's layout over a number of ranks."""
    ranks: int                    # ranks that write (MPI processes)
    data: int                     # data-parallel degree the shares are computed for
    subset: bool                  # fewer ranks than TP*PP*DP: only the first `ranks` shares are written

    def full_ranks(self, par: ParallelismSpec) -> int:
        return par.model_parallel * self.data


def layout(cm: CheckpointModel, ranks: int | None = None) -> Layout:
    """The layout of a checkpoint over `ranks` processes (default TP*PP*DP of the workload).

    Fewer ranks than the workload's TP*PP*DP: MLPerf's subset mode (DLIO checkpoint.mode subset),
    each rank writing its share of the full run's checkpoint. Otherwise DLIO's default mode: the
    ranks must be a multiple of TP*PP, and DP = ranks / (TP*PP)."""
    par = cm.parallelism
    mp = par.model_parallel
    if ranks is None:
        if not par.data:
            raise UsageError(f"{cm.name}: the workload sets no data parallelism ([parallelism] data, DLIO "
                             f"model.parallelism.data): give --ranks (a multiple of TP x PP = {mp})")
        ranks = mp * par.data
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks <= 0:
        raise UsageError(f"--ranks: must be a positive integer, got {ranks!r}")
    if par.data and ranks < mp * par.data:
        return Layout(ranks, par.data, True)
    if ranks % mp:
        raise UsageError(f"--ranks {ranks}: not a multiple of TP x PP = {par.tensor} x {par.pipeline} = {mp}"
                         + (f" (or fewer than {mp * par.data}: a subset)" if par.data else ""))
    return Layout(ranks, ranks // mp, False)


@lru_cache(maxsize=64)
def num_parameters(model: ModelSpec) -> int:
    """The transformer's parameters as DLIO counts them: embedding, per layer (input norm, Q/K/V,
    attention output, post-attention norm, gated MLP up (x2) and down), final norm, lm_head."""
    if not model.is_transformer:
        return 0
    h, f = model.hidden_size, model.ffn_hidden_size
    kv = (h // model.num_attention_heads) * model.num_kv_heads     # columns of K and of V
    embedding = model.vocab_size * h
    per_layer = h + h * (h + 2 * kv) + h * h + h + 2 * f * h + f * h
    return embedding + per_layer * model.num_layers + h + embedding


def _layer_elements(model: ModelSpec, par: ParallelismSpec, data: int, layer: int) -> int:
    """Elements of layer `layer` one rank holds. Layers are numbered as DLIO numbers them: 0 the
    embedding, 1..L the transformer layers, L+1 the lm_head, L+2 the final norm. Each tensor is
    divided on its own (integer division, as DLIO does) by TP (matrices only) and, with ZeRO 3,
    by DP."""
    h, L, tp = model.hidden_size, model.num_layers, par.tensor
    shard = data if par.zero_stage >= 3 else 1
    if layer in (0, L + 1):
        return h * model.vocab_size // tp // shard
    if layer == L + 2:
        return h // shard
    kv = (h // model.num_attention_heads) * model.num_kv_heads
    return (h // shard + h * (h + 2 * kv) // tp // shard + h * h // tp // shard + h // shard
            + h * 2 * model.ffn_hidden_size // tp // shard + h * model.ffn_hidden_size // tp // shard)


def layer_range(model: ModelSpec, par: ParallelismSpec, pipeline_rank: int) -> tuple[int, int]:
    """First and last layer (inclusive) of a pipeline stage: the transformer layers split as
    evenly as they go, the first `L % PP` stages taking one more; the embedding (layer 0) on the
    first stage, the lm_head and final norm (L+1, L+2) on the last."""
    L, pp = model.num_layers, par.pipeline
    per, extra = divmod(L, pp)
    if pipeline_rank < extra:
        start = pipeline_rank * (per + 1) + 1
        end = start + per
    else:
        start = extra * (per + 1) + (pipeline_rank - extra) * per + 1
        end = start + per - 1
    if pipeline_rank == pp - 1:
        end = L + 2
    if pipeline_rank == 0:
        start = 0
    return start, end


def optimizer_elements(model: ModelSpec, par: ParallelismSpec, data: int) -> int:
    """Elements of one rank's optimizer state: three groups of (parameters / (DP*TP*PP)) and
    hidden_size*5 each (ZeRO 0: parameters / (TP*PP), on the first model-parallel group only)."""
    if not model.is_transformer:
        return 0
    share = num_parameters(model) // (par.model_parallel * (data if par.zero_stage > 0 else 1))
    return 3 * (share + 5 * model.hidden_size) if share > 0 else 0


def rank_files(cm: CheckpointModel, rank: int, ranks: int) -> list[tuple[str, int]]:
    """(file name, bytes) of what `rank` writes in one checkpoint of a run of `ranks` processes,
    in the order DLIO writes them (model, then optimizer). Names are relative to the checkpoint's
    own folder (DLIO: CHECKPOINT_FOLDER/global_epochE_stepS/)."""
    lay = layout(cm, ranks)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < lay.ranks:
        raise ValueError(f"rank {rank!r} is not one of the {lay.ranks} ranks")
    return _rank_files(cm.model, cm.parallelism, rank, lay.data)


def _rank_files(model: ModelSpec, par: ParallelismSpec, rank: int, data: int) -> list[tuple[str, int]]:
    mp = par.model_parallel
    if par.zero_stage == 0 and rank >= mp:
        return []                    # without ZeRO, only the first model-parallel group writes
    pp_rank, dp_rank, mp_rank = (rank // par.tensor) % par.pipeline, rank // mp, rank % mp
    files: list[tuple[str, int]] = []
    if model.layout == "dlio-0.5":
        return [("model.bin", model.model_size)] if rank == 0 else []
    if model.layout == "dlio-1.0":
        return [(f"model-{rank}.{EXT}", model.model_size), (f"layer-0-{rank}.{EXT}", DLIO_1_0_LAYER_BYTES)] \
            if rank == 0 else []
    if not model.is_transformer:
        if model.model_size > 0:
            files.append((f"model_states-{rank}.{EXT}", model.model_size))
        return files
    msize, osize = DATATYPES[model.model_datatype], DATATYPES[model.optimizer_datatype]
    first, last = layer_range(model, par, pp_rank)
    if par.zero_stage in (1, 2):
        # the model lives on data-parallel rank 0 only (ZeRO 2 holds it everywhere but, in DLIO,
        # writes it there only too); with pipeline stages, one file per layer
        if dp_rank == 0:
            if par.pipeline > 1:
                files += [(f"layer_{i}-model_{mp_rank}_model_states.{EXT}",
                           _layer_elements(model, par, data, i) * msize) for i in range(first, last + 1)]
            else:
                files.append((f"model_{mp_rank}_model_states.{EXT}",
                              sum(_layer_elements(model, par, data, i) for i in range(first, last + 1)) * msize))
    else:
        # ZeRO 0 (first model-parallel group) and ZeRO 3 (every rank, sharded over DP): one file
        files.append((f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}_model_states.{EXT}",
                      sum(_layer_elements(model, par, data, i) for i in range(first, last + 1)) * msize))
    opt = optimizer_elements(model, par, data)
    if opt:
        files.append((f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}_optim_states.{EXT}", opt * osize))
    return files


@record(frozen=True)
class Plan:
    """Every rank's files of one checkpoint."""
    name: str
    layout: Layout
    files: list[list[tuple[str, int]]]        # per rank

    @property
    def per_rank_bytes(self) -> list[int]:
        return [sum(b for _n, b in fs) for fs in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(self.per_rank_bytes)

    def kinds(self) -> list[tuple[list[int], tuple[int, ...]]]:
        """(ranks, their files' sizes) for each kind of rank (ranks that write the same sizes), by
        the first rank of each kind."""
        kinds: dict[tuple, list[int]] = {}
        for r, fs in enumerate(self.files):
            kinds.setdefault(tuple(b for _n, b in fs), []).append(r)
        return sorted(((ranks, sizes) for sizes, ranks in kinds.items()), key=lambda kv: kv[0][0])

    def to_dict(self, wl=None) -> dict:
        """The JSON form (docs/checkpoint.md): model, ranks, total_bytes, per_rank_bytes, files and,
        given the workload, what a run of it does with them (schedule)."""
        d = {"model": self.name, "ranks": self.layout.ranks, "total_bytes": self.total_bytes,
             "per_rank_bytes": self.per_rank_bytes,
             "files": [[{"name": n, "bytes": b} for n, b in fs] for fs in self.files]}
        return {**d, **schedule(wl)} if wl is not None else d


def schedule(wl) -> dict:
    """writes, reads and fsync of a run of workload wl. A checkpoint-only workload: its writes and
    reads. A training workload checkpoints by epochs (the epochs after_epoch, after_epoch +
    every_epochs, ... up to epochs) and reads none back; by steps, the writes depend on the steps
    per epoch, which depend on the ranks: None."""
    ck = wl.checkpoint
    if wl.dataset is None:
        writes, reads = ck.writes, ck.reads
    elif ck.every_steps:
        writes, reads = None, 0
    else:
        epochs = wl.train.epochs
        writes = len(range(ck.after_epoch, epochs + 1, ck.every_epochs)) if ck.after_epoch <= epochs else 0
        reads = 0
    return {"writes": writes, "reads": reads, "fsync": ck.fsync}


def plan(cm: CheckpointModel, ranks: int | None = None) -> Plan:
    """The whole checkpoint over `ranks` processes (default the workload's TP*PP*DP)."""
    lay = layout(cm, ranks)
    return Plan(cm.name, lay, [_rank_files(cm.model, cm.parallelism, r, lay.data) for r in range(lay.ranks)])
