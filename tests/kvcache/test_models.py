"""KV bytes per token of every built-in model against hand arithmetic from its published shape
(config.json of each model: num_hidden_layers, num_key_value_heads, head_dim; deepseek-v3's MLA:
kv_lora_rank 512 + qk_rope_head_dim 64 per layer), fp16; and MLPerf's options."""
import pytest

from iodl.kvcache import HEADER_BYTES, MODELS, OPTIONS, decode_reads, entry_bytes

# model -> bytes per token worked out by hand: layers x KV heads x head dim x (K and V) x 2 bytes
BY_HAND = {
    "tiny-1b": 12 * 4 * 128 * 2 * 2,                  # 24,576
    "llama3.1-8b": 32 * 8 * 128 * 2 * 2,              # 131,072
    "mistral-7b": 32 * 8 * 128 * 2 * 2,               # 131,072
    "llama2-7b": 32 * 32 * 128 * 2 * 2,               # 524,288: no GQA, 32 KV heads
    "llama3.1-70b-instruct": 80 * 8 * 128 * 2 * 2,    # 327,680
    "qwen3-32b": 64 * 8 * 128 * 2 * 2,                # 262,144
    "gpt-oss-120b": 36 * 8 * 64 * 2 * 2,              # 73,728
    "gpt-oss-20b": 24 * 8 * 64 * 2 * 2,               # 49,152
    "deepseek-v3": 61 * (512 + 64) * 2,               # 70,272: one latent per layer, no K/V per head
}


def test_every_model_is_listed_and_none_other():
    assert set(MODELS) == set(BY_HAND)


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_bytes_per_token_is_the_published_shape_worked_out_by_hand(name):
    assert MODELS[name].bytes_per_token == BY_HAND[name]


def test_the_numbers_as_written_out():
    assert [MODELS[n].bytes_per_token for n in ("llama3.1-8b", "llama3.1-70b-instruct", "deepseek-v3", "tiny-1b")] \
        == [131_072, 327_680, 70_272, 24_576]


def test_an_entry_is_its_context_times_bytes_per_token_plus_the_npy_header():
    assert HEADER_BYTES == 128
    assert entry_bytes(10_000, MODELS["llama3.1-8b"].bytes_per_token) == 1_310_720_128
    assert entry_bytes(1, MODELS["deepseek-v3"].bytes_per_token) == 70_400


def test_mlperf_options():
    assert (OPTIONS[1].model, OPTIONS[1].users, OPTIONS[1].cpu_memory_gb, OPTIONS[1].max_concurrent_writes) == \
        ("llama3.1-8b", 200, 0, 16)
    assert (OPTIONS[2].model, OPTIONS[2].users, OPTIONS[2].cpu_memory_gb, OPTIONS[2].max_concurrent_writes) == \
        ("llama3.1-8b", 100, 4, 16)
    assert (OPTIONS[3].model, OPTIONS[3].users, OPTIONS[3].cpu_memory_gb, OPTIONS[3].max_concurrent_writes) == \
        ("llama3.1-70b-instruct", 70, 0, 4)
    assert {o.duration_s for o in OPTIONS.values()} == {300.0}


@pytest.mark.parametrize("generation, reads", [(1, 2), (31, 2), (32, 2), (33, 3), (200, 8), (800, 26)])
def test_decode_reads_the_entry_once_then_once_per_32_tokens(generation, reads):
    assert decode_reads(generation) == reads
