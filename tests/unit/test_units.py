import pytest
from hypothesis import given, strategies as st

from iodl.errors import UsageError
from iodl.units import format_size, format_size_exact, parse_size


@pytest.mark.parametrize("text,expected", [
    ("114660B", 114_660), ("1MiB", 1 << 20), ("4KiB", 4096), ("1.3MB", 1_300_000), ("1MB", 10 ** 6),
    ("1kB", 1000), ("1KB", 1000), ("1k", 1000), ("2GiB", 2 << 30), ("1.5KiB", 1536), ("0.5MiB", 1 << 19),
    (" 64 KiB ", 65536), ("4096", 4096), ("1e6", 10 ** 6), ("2.5e3B", 2500), ("1TB", 10 ** 12), ("1TiB", 1 << 40),
    ("1Mi", 1 << 20), ("0", 0), (".5KB", 500), (4096, 4096), (0, 0),
])
def test_parse_size_known_values(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "MiB", "1.2.3MB", "-1", "-1KiB", "1 XB", "0.5B", "1.0001KB", "1e-3", "abc",
                                 "1MiBB", None, 1.5, True, [], -5, "nan", "inf", "1e30EB"])
def test_parse_size_rejects_with_a_usage_error_naming_the_value(bad):
    with pytest.raises(UsageError) as e:
        parse_size(bad, what="[read] block_size")
    assert str(e.value).startswith("[read] block_size: ")
    assert "\n" not in str(e.value)


@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.none(), st.booleans(),
                 st.from_regex(r"\A-?[0-9]{0,25}(\.[0-9]{0,8})?(e-?[0-9]{1,4})? ?[kKmMgGtTpPeE]?i?[bB]?\Z")))
def test_parse_size_fuzz_returns_a_nonnegative_int_or_raises_only_usage_error(value):
    try:
        n = parse_size(value)
    except UsageError:
        return
    assert isinstance(n, int) and 0 <= n < 1 << 63


@given(st.integers(min_value=0, max_value=(1 << 63) - 1))
def test_exact_format_round_trips(n):
    assert parse_size(format_size_exact(n)) == n


@pytest.mark.parametrize("n,expected", [(1 << 20, "1MiB"), (114_660, "114660B"), (1_300_000, "1300kB"),
                                        (4096, "4KiB"), (0, "0B"), (10 ** 9, "1GB")])
def test_exact_format_picks_the_largest_whole_unit(n, expected):
    assert format_size_exact(n) == expected


@pytest.mark.parametrize("n,binary,expected", [(143_452_660, False, "143 MB"), (1 << 20, True, "1.00 MiB"),
                                               (999, False, "999 B"), (65536, False, "65.5 kB"),
                                               (3 * 10 ** 12, False, "3.00 TB")])
def test_human_format(n, binary, expected):
    assert format_size(n, binary=binary) == expected


@pytest.mark.parametrize("digits", ["1" + "0" * 4000, "0." + "0" * 4000 + "1", "9" * 100_000])
def test_parse_size_refuses_a_mantissa_too_long_for_int_in_one_line(digits):
    # past 4000 digits int() would raise ValueError (sys.int_info's limit): a traceback, not a usage error
    with pytest.raises(UsageError, match=r"^size: not a size: .*\(more than 4000 digits\)$") as err:
        parse_size(digits + "KB")
    # the value is named by its ends and length, not echoed: a line a terminal can show
    assert len(str(err.value)) < 120 and f"({len(digits) + 2:,} characters)" in str(err.value)
