"""The datasheet table: schema, sources, self-consistency (no sparse figure passes as dense), and
machine models built from it."""

import json
from importlib import resources

import jsonschema
import pytest

from pygpuperf.analyze import machine_model
from pygpuperf.core import documents
from pygpuperf.facts import datasheets
from pygpuperf.facts import peaks

SLUGS = {"h200-sxm", "h100-sxm", "h100-pcie", "a100-sxm4-80gb", "a100-sxm4-40gb", "a100-pcie-80gb", "v100-sxm2",
         "rtx2080ti", "titan-rtx", "rtx3080", "rtx3090", "rtx4090", "rtx-a6000", "a40", "l40s", "mi250x", "mi300x"}
REQUIRED_FACTS = {"vendor", "segment", "architecture", "compute_capability", "memory_type", "memory_gb",
                  "multiprocessors", "boost_clock_mhz", "pcie_generation", "pcie_width", "gpu_link_gbs_total", "tdp_w"}
H200_RESULTS = "benchmarks/results/nvidia-h200_2026-11-30_memory-hierarchy_results.json"


def _text(name: str) -> str:
    return resources.files("pygpuperf").joinpath(f"data/{name}").read_text(encoding="utf-8")


def _cards():
    return datasheets.datasheet_document()["cards"]


def _value(card, name):
    return datasheets.datasheet_value(card, name)


def _fact(card, name):
    return datasheets.datasheet_fact(card, name)


def test_table_validates_against_its_schema():
    schema, doc = json.loads(_text("datasheets.schema.json")), json.loads(_text("datasheets.json"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(doc)) == []
    datasheets.validate_datasheets(doc)  # and the checks a schema cannot express


def test_every_card_has_its_facts_and_every_figure_a_versioned_source():
    sources = datasheets.datasheet_document()["sources"]
    assert {c["key"] for c in _cards()} == SLUGS
    for card in _cards():
        assert REQUIRED_FACTS <= set(card["facts"]), card["key"]
        for entry in [*card["facts"].values(), *card["values"].values()]:
            doc = sources[entry["source"]]
            assert doc["title"] and doc["version"], entry
        assert _value(card, "memory.hbm"), f"{card['key']}: GPUs key main memory as memory.hbm"
        assert _value(card, "compute.tensor.fp16.acc32") or _value(card, "compute.tensor.fp16.acc16")


def _fp16_dense(card):
    return max(v for v in (_value(card, "compute.tensor.fp16.acc16"), _value(card, "compute.tensor.fp16.acc32")) if v)


def _unit_limit(card, kind):
    """TFLOP/s the card's multiprocessors allow at boost clock for `kind`, from the per-clock table."""
    per_clock = peaks.per_clock_rate(_fact(card, "compute_capability"), kind)
    assert per_clock, f"{card['key']}: no per-clock rate for {kind} on {_fact(card, 'compute_capability')}"
    return _fact(card, "multiprocessors") * _fact(card, "boost_clock_mhz") * 1e6 * per_clock / 1e12


def test_no_figure_exceeds_what_the_multiprocessors_allow_at_boost_clock():
    checked = 0
    for card in _cards():
        for name, entry in card["values"].items():
            parts = name.split(".")
            if parts[:2] not in (["compute", "tensor"], ["compute", "cuda"]):
                continue
            limit = _unit_limit(card, f"{parts[1]}.{parts[2]}")
            assert entry["value"] <= 1.05 * limit, f"{card['key']} {name}: {entry['value']} > {limit:.1f}"
            checked += 1
    assert checked > 100


def test_the_per_clock_check_would_catch_a_sparse_figure():
    # A figure 'with sparsity' is twice the dense one: the bound above must be tight enough to reject it.
    for card in _cards():
        assert 2 * _fp16_dense(card) > 1.05 * _unit_limit(card, "tensor.fp16"), card["key"]


def test_lower_precisions_stay_within_twice_the_dense_fp16_rate():
    # 2 % for vendor rounding (the L40S datasheet: FP16 362.05, FP8 733); a sparse figure is 100 % over.
    for card in _cards():
        fp16 = _fp16_dense(card)
        for name in ("compute.tensor.fp8.acc32", "compute.tensor.fp8.acc16", "compute.tensor.int8.acc32"):
            value = _value(card, name)
            assert value is None or value <= 2 * fp16 * 1.02, f"{card['key']} {name}"
        tf32, bf16 = _value(card, "compute.tensor.tf32.acc32"), _value(card, "compute.tensor.bf16.acc32")
        assert tf32 is None or tf32 <= 0.5 * fp16 * 1.02, card["key"]
        assert bf16 is None or bf16 <= fp16 * 1.02, card["key"]


def test_geforce_cards_accumulate_fp32_at_half_rate_and_the_others_at_full_rate():
    ratios = {}
    for card in _cards():
        acc16, acc32 = _value(card, "compute.tensor.fp16.acc16"), _value(card, "compute.tensor.fp16.acc32")
        if acc16 and acc32:
            ratios[card["key"]] = (_fact(card, "segment"), acc32 / acc16)
    for key, (segment, ratio) in ratios.items():
        assert ratio == pytest.approx(0.5 if segment == "geforce" else 1.0, abs=0.005), key
    assert ratios["titan-rtx"][1] == pytest.approx(1.0)  # full rate, unlike the 2080 Ti on the same die
    assert {k for k, (s, _) in ratios.items() if s == "geforce"} == {"rtx2080ti", "rtx3080", "rtx3090", "rtx4090"}
    # BF16 only accumulates in FP32: it runs at the FP32-accumulate rate everywhere.
    for card in _cards():
        bf16, acc32 = _value(card, "compute.tensor.bf16.acc32"), _value(card, "compute.tensor.fp16.acc32")
        if bf16 and acc32:
            assert bf16 == pytest.approx(acc32), card["key"]


def test_host_link_figures_follow_the_pcie_facts():
    for card in _cards():
        expected = peaks.pcie_gbps(_fact(card, "pcie_generation"), _fact(card, "pcie_width"))
        for name in ("transfer.h2d.pinned", "transfer.d2h.pinned"):
            assert _value(card, name) == pytest.approx(expected, rel=0.01), f"{card['key']} {name}"


def test_memory_bandwidth_follows_bus_width_and_data_rate_where_given():
    checked = 0
    for card in _cards():
        bits, gbps = _fact(card, "memory_bus_bits"), _fact(card, "memory_data_rate_gbps")
        if bits and gbps:
            assert _value(card, "memory.hbm") == pytest.approx(bits * gbps / 8, rel=0.02), card["key"]
            checked += 1
    assert checked >= 10


def test_gpu_link_and_memory_facts_are_consistent():
    for card in _cards():
        kind = _fact(card, "memory_type")
        assert kind.startswith(("HBM", "GDDR")), card["key"]
        if _fact(card, "segment") == "geforce":
            assert kind.startswith("GDDR") and not _fact(card, "devices_per_board"), card["key"]
    assert _fact(machine_model.card("rtx4090"), "gpu_link_gbs_total") == 0
    assert _fact(machine_model.card("h100-sxm"), "gpu_link_gbs_total") == 900


def test_library_entries_mirror_the_tensor_figures():
    mirror = {"library.fp16": "tensor.fp16.acc32", "library.fp16acc16": "tensor.fp16.acc16",
              "library.bf16": "tensor.bf16.acc32", "library.tf32": "tensor.tf32.acc32", "library.fp8": "tensor.fp8.acc32",
              "library.int8": "tensor.int8.acc32", "library.fp32": "cuda.fp32"}
    for card in _cards():
        for lib, tensor in mirror.items():
            assert _value(card, f"compute.{lib}") == _value(card, f"compute.{tensor}"), f"{card['key']} {lib}"


def test_device_names_find_their_card_and_only_theirs():
    prefixes = [(p, c["key"]) for c in _cards() for p in c["match"]]
    for prefix, key in prefixes:
        assert datasheets.datasheet_for(prefix)["key"] == key
        for other, other_key in prefixes:
            if other_key != key:
                assert not other.startswith(prefix), (prefix, other)
    assert datasheets.datasheet_for("NVIDIA H200")["key"] == "h200-sxm"
    assert datasheets.datasheet_for("NVIDIA H100 80GB HBM3")["key"] == "h100-sxm"
    assert datasheets.datasheet_for("Tesla V100-SXM2-16GB")["key"] == "v100-sxm2"
    for other_board in ("NVIDIA H200 NVL", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3080 Ti",
                        "NVIDIA GeForce RTX 4090 D", "NVIDIA B200", "cpu"):
        assert datasheets.datasheet_for(other_board) is None, other_board


def test_datasheet_value_reads_memory_levels_and_misses_cleanly():
    h200 = datasheets.datasheet_for("NVIDIA H200")
    assert datasheets.datasheet_value(h200, "memory.hbm.copy") == 4800
    assert datasheets.datasheet_value(h200, "compute.tensor.fp16.acc32") == 989.5
    assert datasheets.datasheet_value(h200, "latency.l2") is None
    assert datasheets.datasheet_value(None, "memory.hbm.copy") is None


def test_every_card_loads_as_a_machine_model_with_ceilings_and_an_l2():
    # The kernel-time model needs compute and memory ceilings and the L2 size of every card the
    # table lists, the cards added later included.
    for key in machine_model.card_keys():
        model = machine_model.machine_model(key)
        assert model.compute and all(c.value > 0 for c in model.compute.values()), key
        assert model.memory["hbm"].value > 0, key
        assert model.capacity["l2"].value > 0 and model.capacity["l2"].unit == "B", key
        assert all(machine_model.facts(key)[name] > 0 for name in ("multiprocessors", "boost_clock_mhz")), key


def test_secondary_sources_only_stand_in_for_l2_sizes():
    # deviceQuery postings stand in for an L2 size no vendor document gives; nothing else may cite them.
    for card in _cards():
        for table in ("facts", "values"):
            for name, entry in card[table].items():
                if entry["source"] == "device-query":
                    assert (table, name) == ("facts", "l2_cache_mib"), (card["key"], name)
    # and where a vendor document gives the L2, it is cited instead
    assert machine_model.card("rtx4090")["facts"]["l2_cache_mib"]["source"] == "nv-ada-wp"
    assert machine_model.card("rtx-a6000")["facts"]["l2_cache_mib"]["source"] == "nv-ga102-wp"


def test_rechecked_figures():
    a100_sxm, a100_pcie = machine_model.card("a100-sxm4-80gb"), machine_model.card("a100-pcie-80gb")
    assert (_value(a100_sxm, "memory.hbm"), _value(a100_pcie, "memory.hbm")) == (2039, 1935)
    assert (_fact(a100_sxm, "tdp_w"), _fact(a100_pcie, "tdp_w")) == (400, 300)
    assert a100_pcie["facts"]["tdp_w"]["source"] == "nv-a100-80gb-ds"
    # no TF32 figure for the RTX A6000 until one is re-read in a vendor document
    assert _value(machine_model.card("rtx-a6000"), "compute.tensor.tf32.acc32") is None
    mi300x = machine_model.card("mi300x")
    assert _value(mi300x, "compute.tensor.fp16.acc32") == pytest.approx(2048 * 304 * 2.1e-3, rel=1e-3)
    assert _value(mi300x, "compute.tensor.fp8.acc32") == pytest.approx(4096 * 304 * 2.1e-3, rel=1e-3)


def test_machine_model_from_a_datasheet():
    model = machine_model.machine_model("h200-sxm")
    assert model.origin == "datasheet" and model.device == "H200 SXM"
    fp16 = model.compute["tensor.fp16.acc32"]
    assert (fp16.value, fp16.unit, fp16.backend) == (989.5, "TFLOP/s", "datasheet")
    assert "H200 Tensor Core GPU datasheet" in fp16.source and "halved" in fp16.source
    assert model.compute["tensor.int8.acc32"].unit == "TOP/s"
    assert set(model.memory) == {"hbm"} and model.memory["hbm"].value == 4800
    assert model.links["h2d.pinned"].value == pytest.approx(63.0)
    assert model.dram_key() == "hbm" and model.ridge_point("tensor.fp16.acc32", "hbm") == pytest.approx(989.5e3 / 4800)
    ceilings = [c for table in (model.compute, model.memory, model.links) for c in table.values()]
    assert all(c.backend == "datasheet" for c in ceilings)


def test_datasheet_models_use_the_keys_of_measured_models():
    try:
        measured = documents.load_results(H200_RESULTS).machine_model
    except documents.ResultsFileError:
        pytest.skip("the committed H200 results no longer match the schema")
    sheet = machine_model.machine_model("h200-sxm")
    measured_tensor = {k for k in measured.compute if k.startswith(("tensor.", "cuda.fp32", "cuda.fp64"))}
    assert measured_tensor <= set(sheet.compute)
    assert measured.dram_key() in sheet.memory and "h2d.pinned" in measured.links and "h2d.pinned" in sheet.links


def test_a_datasheet_model_fits_the_results_schema():
    try:
        results = documents.load_results(H200_RESULTS)
    except documents.ResultsFileError:
        pytest.skip("the committed H200 results no longer match the schema")
    results.machine_model = machine_model.machine_model("rtx3090")
    documents.validate_document(results.to_dict(), "results with a datasheet model")


def test_unknown_card_names_the_known_ones():
    with pytest.raises(machine_model.UnknownCardError) as err:
        machine_model.machine_model("rtx9090")
    assert "rtx9090" in str(err.value) and "rtx3090" in str(err.value)


def _doc():
    return json.loads(_text("datasheets.json"))


def _bad(mutate) -> str:
    doc = _doc()
    mutate(doc)
    with pytest.raises(datasheets.DatasheetError) as err:
        datasheets.parse_datasheets(json.dumps(doc), "test.json")
    message = str(err.value)
    assert "\n" not in message and message.startswith("test.json: ")
    return message


def test_malformed_tables_are_rejected_with_one_line():
    assert "cites source 'nowhere'" in _bad(lambda d: d["cards"][0]["values"]["memory.hbm"].update(source="nowhere"))
    assert "values/memory.hbm/value" in _bad(lambda d: d["cards"][0]["values"]["memory.hbm"].update(value="900"))
    assert "__class__" in _bad(lambda d: d["cards"][0].update(__class__="os.system"))
    assert "segment" in _bad(lambda d: d["cards"][0]["facts"].pop("segment"))
    assert "overlaps" in _bad(lambda d: d["cards"][1]["match"].append("Tesla"))
    assert "appears twice" in _bad(lambda d: d["cards"].append(d["cards"][0]))
    assert "value" in _bad(lambda d: d["cards"][0]["values"]["memory.hbm"].update(value=1e300))
    for text in ("not json", '{"cards": NaN}', "[" * 100000):
        with pytest.raises(datasheets.DatasheetError, match="not valid JSON"):
            datasheets.parse_datasheets(text, "test.json")


def test_theoretical_peak_of_amd_parts_uses_their_gfx_target():
    # torch reports CDNA 2 as compute capability 9.0, Hopper's; the gfx target must decide.
    mi250x_die = {"name": "AMD Instinct MI250X", "compute_capability": "9.0", "multiprocessor_count": 110,
                  "sm_clock_max_mhz": 1700}
    assert peaks.theoretical_peak("compute.tensor.fp16.acc32", mi250x_die).value == pytest.approx(1024 * 110 * 1.7e-3)
    mi300x = {"name": "AMD Instinct MI300X", "compute_capability": "9.4", "multiprocessor_count": 304,
              "sm_clock_max_mhz": 2100}
    assert peaks.theoretical_peak("compute.tensor.fp8.acc32", mi300x).value == pytest.approx(2614.9, rel=1e-3)
    hopper = {"name": "NVIDIA H200", "compute_capability": "9.0", "multiprocessor_count": 132, "sm_clock_max_mhz": 1980}
    assert peaks.theoretical_peak("compute.tensor.fp16.acc32", hopper).value == pytest.approx(4096 * 132 * 1.98e-3)
