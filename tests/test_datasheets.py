"""The datasheet table: schema, sources, self-consistency (no sparse figure passes as dense), and
machine models built from it."""

import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from pygpuperf.analyze import machine_model
from pygpuperf.core import documents
from pygpuperf.facts import datasheets
from pygpuperf.facts import peaks

NEW_CARDS = {"t4", "l4", "a10", "h100-nvl", "gh200", "gh200-144g", "b200", "rtx5090"}
SLUGS = {"h200-sxm", "h100-sxm", "h100-pcie", "a100-sxm4-80gb", "a100-sxm4-40gb", "a100-pcie-80gb", "v100-sxm2",
         "rtx2080ti", "titan-rtx", "rtx3080", "rtx3090", "rtx4090", "rtx-a6000", "a40", "l40s", "mi250x",
         "mi300x"} | NEW_CARDS
REQUIRED_FACTS = {"vendor", "segment", "architecture", "compute_capability", "memory_type", "memory_gb",
                  "multiprocessors", "boost_clock_mhz", "pcie_generation", "pcie_width", "gpu_link_gbs_total", "tdp_w"}
H200_RESULTS = Path(__file__).parents[1] / "benchmarks/reference/machines/nvidia-h200_2026-12-01_machine-model_results.json"


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


# Per-clock rates (FLOP per clock per SM, fastest accumulate) of architectures facts/peaks.py does not
# list yet, derived the way peaks.py derives its own (vendor dense peak / (SMs x clock)):
#   10.0 (B200): 2,250 FP16 TFLOPS dense / (148 SMs x 1.855 GHz) = 8192; FP8 and INT8 twice that, TF32 half;
#                FP32 and FP64 as Hopper (75 TFLOPS at 256 per SM is the B200 entry's derived clock).
#   12.0 (GeForce RTX 5090): 419 FP16-accumulate TFLOPS / (170 SMs x 2.407 GHz) = 1024; FP8/INT8 838 -> 2048;
#                FP32 104.8 -> 256: the Ada (8.9) rates.
# peaks.py wins wherever it has the architecture (test_pending_per_clock_rates_agree_with_peaks).
PENDING_PER_CLOCK = {
    "10.0": {"tensor.fp16": 8192, "tensor.bf16": 8192, "tensor.tf32": 4096, "tensor.fp8": 16384,
             "tensor.int8": 16384, "cuda.fp32": 256, "cuda.fp64": 128},
    "12.0": {"tensor.fp16": 1024, "tensor.bf16": 1024, "tensor.tf32": 512, "tensor.fp8": 2048,
             "tensor.int8": 2048, "cuda.fp32": 256, "cuda.fp64": 4},
}


def _per_clock(arch, kind):
    return peaks.per_clock_rate(arch, kind) or PENDING_PER_CLOCK.get(arch, {}).get(kind)


def _unit_limit(card, kind):
    """TFLOP/s the card's multiprocessors allow at boost clock for `kind`, from the per-clock table."""
    per_clock = _per_clock(_fact(card, "compute_capability"), kind)
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
    assert {k for k, (s, _) in ratios.items() if s == "geforce"} == {"rtx2080ti", "rtx3080", "rtx3090", "rtx4090",
                                                                     "rtx5090"}
    # BF16 only accumulates in FP32: it runs at the FP32-accumulate rate everywhere.
    for card in _cards():
        bf16, acc32 = _value(card, "compute.tensor.bf16.acc32"), _value(card, "compute.tensor.fp16.acc32")
        if bf16 and acc32:
            assert bf16 == pytest.approx(acc32), card["key"]


# Cards whose host link is not PCIe: the GPU reaches host memory over NVLink-C2C (900 GB/s both ways).
C2C_HOST_LINK = {"gh200": 450.0, "gh200-144g": 450.0}


def test_host_link_figures_follow_the_pcie_facts():
    for card in _cards():
        expected = peaks.pcie_gbps(_fact(card, "pcie_generation"), _fact(card, "pcie_width"))
        for name in ("transfer.h2d.pinned", "transfer.d2h.pinned"):
            entry = card["values"][name]
            if card["key"] in C2C_HOST_LINK:
                assert entry["source"] != "pcie" and "NVLink-C2C" in entry["note"], card["key"]
                assert entry["value"] == pytest.approx(C2C_HOST_LINK[card["key"]]), card["key"]
                assert entry["value"] > 2 * expected  # far above the PCIe figure its facts name
            else:
                assert entry["source"] == "pcie", f"{card['key']} {name}"
                assert entry["value"] == pytest.approx(expected, rel=0.01), f"{card['key']} {name}"


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
        assert datasheets.datasheet_for(prefix.removesuffix("$"))["key"] == key
        for other, other_key in prefixes:
            if other_key != key and not prefix.endswith("$"):  # an exact name catches no other name
                assert not other.startswith(prefix), (prefix, other)
    assert datasheets.datasheet_for("NVIDIA H200")["key"] == "h200-sxm"
    assert datasheets.datasheet_for("NVIDIA H100 80GB HBM3")["key"] == "h100-sxm"
    assert datasheets.datasheet_for("Tesla V100-SXM2-16GB")["key"] == "v100-sxm2"
    for name, key in (("Tesla T4", "t4"), ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA GH200 480GB", "gh200"),
                      ("NVIDIA GH200 144G HBM3e", "gh200-144g"), ("NVIDIA B200", "b200"),
                      ("NVIDIA GeForce RTX 5090", "rtx5090"), ("NVIDIA L40S", "l40s"),
                      ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), ("NVIDIA H100 PCIe", "h100-pcie")):
        assert datasheets.datasheet_for(name)["key"] == key, name
    for other_board in ("NVIDIA H200 NVL", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3080 Ti",
                        "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 5090 D", "NVIDIA A10G", "cpu"):
        assert datasheets.datasheet_for(other_board) is None, other_board


# torch names the L4 and the A10 by strings that are prefixes of other cards' names ("NVIDIA L40S",
# "NVIDIA A100-..."): their entries match the exact name (a trailing "$").
EXACT_NAME_CARDS = {"NVIDIA L4": "l4", "NVIDIA A10": "a10"}


def test_cards_named_by_a_prefix_of_another_card_are_found_by_their_exact_name():
    for name, key in EXACT_NAME_CARDS.items():
        assert (datasheets.datasheet_for(name) or {}).get("key") == key, name
    assert datasheets.datasheet_for("NVIDIA L40S")["key"] == "l40s"


def test_an_exact_name_that_a_prefix_also_matches_is_rejected():
    doc = json.loads(json.dumps(datasheets.datasheet_document()))
    doc["cards"][0]["match"] = ["NVIDIA A100-SXM4-80GB$"]  # the a100-sxm4-80gb prefix matches it too
    with pytest.raises(datasheets.DatasheetError, match="overlaps"):
        datasheets.validate_datasheets(doc)


def test_exact_name_cards_never_catch_another_board():
    for name, key in EXACT_NAME_CARDS.items():
        card = machine_model.card(key)
        assert card["match"] == [name + "$"] and "datasheet:" + key in card["notes"], key
        for other in (name + "0S", name + "G", name + "0-SXM4-80GB", name + " "):
            found = datasheets.datasheet_for(other)
            assert found is None or found["key"] != key, other


def test_datasheet_value_reads_memory_levels_and_misses_cleanly():
    h200 = datasheets.datasheet_for("NVIDIA H200")
    assert datasheets.datasheet_value(h200, "memory.hbm.copy") == 4800
    assert datasheets.datasheet_value(h200, "compute.tensor.fp16.acc32") == 989.5
    assert datasheets.datasheet_value(h200, "latency.l2") is None
    assert datasheets.datasheet_value(None, "memory.hbm.copy") is None


def test_every_card_loads_as_a_machine_model_with_ceilings_and_an_l2():
    # The kernel-time model needs compute and memory ceilings, SMs, clock and the L2 size of every card
    # the table lists, the cards added later included; an L2 no source gives is named in the notes.
    missing_l2 = set()
    for key in machine_model.card_keys():
        model = machine_model.machine_model(key)
        assert model.compute and all(c.value > 0 for c in model.compute.values()), key
        assert model.memory["hbm"].value > 0, key
        if "l2" in model.capacity:
            assert model.capacity["l2"].value > 0 and model.capacity["l2"].unit == "B", key
        else:
            assert "L2" in machine_model.card(key).get("notes", ""), f"{key}: no L2 and no note saying so"
            missing_l2.add(key)
        assert all(machine_model.facts(key)[name] > 0 for name in ("multiprocessors", "boost_clock_mhz")), key
        assert model.facts["compute_units"] > 0 and model.facts["clock_mhz"] > 0, key
    assert missing_l2 == {"gh200", "gh200-144g"}


SECONDARY = {"device-query": ("facts", "l2_cache_mib"), "device-query-sm": ("facts", "multiprocessors")}


def test_secondary_sources_only_stand_in_for_l2_sizes():
    # deviceQuery postings stand in for an L2 size (or an SM count) no vendor document gives; nothing else
    # may cite them, and their source says it is secondary.
    sources = datasheets.datasheet_document()["sources"]
    for source_id in SECONDARY:
        assert "secondary" in sources[source_id]["version"], source_id
    cited = set()
    for card in _cards():
        for table in ("facts", "values"):
            for name, entry in card[table].items():
                if entry["source"] in SECONDARY:
                    assert (table, name) == SECONDARY[entry["source"]], (card["key"], name)
                    cited.add(entry["source"])
                elif "secondary" in sources[entry["source"]]["version"]:
                    raise AssertionError(f"{card['key']} {name} cites secondary source {entry['source']}")
    assert cited == set(SECONDARY)
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
    # ROCm MI300 page: 5.3 TB/s, 304 CUs (8 XCDs x 38), 4 MB L2 per XCD, PCIe Gen 5 x16
    assert (_value(mi300x, "memory.hbm"), _fact(mi300x, "multiprocessors"),
            _fact(mi300x, "l2_cache_mib")) == (5300, 304, 32)
    assert (_value(mi300x, "compute.cuda.fp32"), _value(mi300x, "compute.cuda.fp64")) == (163.4, 81.7)
    # H200 datasheet, H200 SXM column (tensor rows with sparsity, halved)
    h200 = machine_model.card("h200-sxm")
    assert (_value(h200, "memory.hbm"), _fact(h200, "memory_gb"), _fact(h200, "tdp_w")) == (4800, 141, 700)
    assert (_value(h200, "compute.tensor.fp16.acc32"), _value(h200, "compute.tensor.fp8.acc32")) == (989.5, 1979)
    # Ada whitepaper Appendix A (v2.02): RTX 4090
    rtx4090 = machine_model.card("rtx4090")
    assert [_value(rtx4090, f"compute.tensor.{k}") for k in ("fp16.acc16", "fp16.acc32", "fp8.acc16", "fp8.acc32",
                                                             "int8.acc32", "tf32.acc32")] == [330.3, 165.2, 660.6,
                                                                                              330.3, 660.6, 82.6]
    assert (_fact(rtx4090, "multiprocessors"), _fact(rtx4090, "boost_clock_mhz"), _fact(rtx4090, "l2_cache_mib")) == \
        (128, 2520, 72.0)
    # GA102 whitepaper: RTX 3080 (10 GB)
    rtx3080 = machine_model.card("rtx3080")
    assert [_value(rtx3080, f"compute.tensor.{k}") for k in ("fp16.acc16", "fp16.acc32", "bf16.acc32",
                                                             "int8.acc32")] == [119, 59.5, 59.5, 238]
    assert (_value(rtx3080, "memory.hbm"), _fact(rtx3080, "multiprocessors"), _fact(rtx3080, "boost_clock_mhz")) == \
        (760, 68, 1710)


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
    measured = documents.load_results(H200_RESULTS).machine_model  # a committed result must keep loading
    sheet = machine_model.machine_model("h200-sxm")
    measured_tensor = {k for k in measured.compute if k.startswith(("tensor.", "cuda.fp32", "cuda.fp64"))}
    assert measured_tensor <= set(sheet.compute)
    assert measured.dram_key() in sheet.memory and "h2d.pinned" in measured.links and "h2d.pinned" in sheet.links


def test_a_datasheet_model_fits_the_results_schema():
    results = documents.load_results(H200_RESULTS)
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


# --- the cards users rent today, and checks that hold for every card -------------------------------------

KERNEL_MODEL_FACTS = ("multiprocessors", "boost_clock_mhz", "l2_cache_mib")


def test_new_cards_load_with_the_kernel_model_facts_each_from_a_versioned_document():
    sources = datasheets.datasheet_document()["sources"]
    for key in NEW_CARDS:
        card = machine_model.card(key)
        assert datasheets.datasheet_for(card["match"][0].removesuffix("$")) is card, key
        model = machine_model.machine_model(key)
        assert model.origin == "datasheet" and model.compute and model.links, key
        for name in KERNEL_MODEL_FACTS:
            if name in card["facts"]:
                assert card["facts"][name]["value"] > 0, (key, name)
            else:  # a figure no source gives is left out, and the notes say so
                assert "L2" in card["notes"] if name == "l2_cache_mib" else False, (key, name)
        for table in ("facts", "values"):
            for name, entry in card[table].items():
                doc = sources[entry["source"]]
                assert doc["publisher"] and doc["title"] and doc["version"], (key, name)
                assert entry["source"] in SECONDARY or entry["source"] == "pcie" or doc["url"].startswith("https://"), \
                    (key, name)


def _number(text):
    return float(text.replace(",", ""))


_PRINTED_PAIR = re.compile(r"([\d][\d.,]*)/([\d][\d.,]*) (?:TOPS )?\(dense/sparse\)")
_BAR_PAIR = re.compile(r"([\d][\d.,]*) \| ([\d][\d.,]*) sparse")


def test_figures_printed_with_sparsity_are_halved_and_pairs_read_dense_first():
    # Every note that quotes a sparse figure must agree with the dense value entered: a sparse figure
    # entered as dense, or a pair read the wrong way round, fails here.
    checked = 0
    for card in _cards():
        for name, entry in card["values"].items():
            note, value = entry.get("note", ""), entry["value"]
            if m := re.search(r"([\d][\d.,]*) (?:PFLOPS |POPS )?(?:\(FP8/FP6\) )?with sparsity, halved", note):
                scale = 1000 if re.search(r"\d (PFLOPS|POPS)", note) else 1
                assert value == pytest.approx(_number(m.group(1)) * scale / 2, rel=1e-3), (card["key"], name)
            elif m := re.search(r"([\d][\d.,]*) with sparsity; the dense figure as printed", note):
                assert value == pytest.approx(_number(m.group(1)) / 2, rel=0.01), (card["key"], name)
            elif m := _PRINTED_PAIR.search(note) or _BAR_PAIR.search(note):
                dense, sparse = _number(m.group(1)), _number(m.group(2))
                assert value == pytest.approx(dense), (card["key"], name)
                assert sparse == pytest.approx(2 * dense, rel=0.02), (card["key"], name)
            else:
                continue
            checked += 1
    assert checked > 150


SPARSE_PRINTING_SOURCES = {"nv-h100-ds", "nv-h200-ds", "nv-h100nvl-ds", "nv-gh200-ds", "nv-blackwell-ds"}


def test_tensor_figures_from_sparse_printing_documents_say_how_they_were_made_dense():
    for card in _cards():
        for name, entry in card["values"].items():
            if name.split(".")[1] in ("tensor", "library") and entry["source"] in SPARSE_PRINTING_SOURCES:
                if name.startswith("compute.library.fp32"):
                    continue
                assert "sparsity" in entry.get("note", ""), (card["key"], name)


def test_dense_fp16_rate_is_at_most_the_fp8_and_int8_rates():
    # FP8 and INT8 run at least at the FP16 rate on every card that has them; a dense FP8 figure below the
    # FP16 one means one of the two was read from the other column (dense vs sparse).
    checked = 0
    for card in _cards():
        fp16 = _fp16_dense(card)
        for name in ("compute.tensor.fp8.acc16", "compute.tensor.fp8.acc32", "compute.tensor.int8.acc32"):
            low_precision = _value(card, name)
            if low_precision:
                accumulate_halved = _fact(card, "segment") == "geforce" and name.endswith("fp8.acc32")
                reference = _value(card, "compute.tensor.fp16.acc32") if accumulate_halved else fp16
                assert reference <= low_precision * 1.001, (card["key"], name)
                checked += 1
    assert checked >= 25


def test_geforce_fp32_accumulate_never_beats_fp16_accumulate():
    for card in _cards():
        if _fact(card, "segment") != "geforce":
            continue
        for kind in ("fp16", "fp8"):
            acc16, acc32 = _value(card, f"compute.tensor.{kind}.acc16"), _value(card, f"compute.tensor.{kind}.acc32")
            if acc16 and acc32:
                assert acc32 <= acc16 / 2 * 1.005, (card["key"], kind)


# FP32 lanes per SM (CU on AMD) by architecture, from the vendors' architecture documents: Turing SM 64
# (Turing whitepaper), GA100 64 (A100 whitepaper), GA102 128 (GA102 whitepaper), Ada 128, Hopper 128
# ("128 FP32 CUDA Cores per SM", Hopper in-depth), Blackwell 128 (RTX 5090: 21,760 CUDA cores / 170 SMs;
# B200 assumed the same), CDNA 2 64 and CDNA 3 128 (ROCm: 128 and 256 vector FP32 FLOP/clock/CU).
FP32_LANES = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128, "9.0": 128, "10.0": 128, "12.0": 128,
              "gfx90a": 64, "gfx942": 128}


def test_fp32_rate_is_two_flop_per_lane_per_clock():
    # compute.cuda.fp32 = 2 x SMs x FP32 lanes x boost clock, within a few percent (vendor rounding): a wrong
    # SM count, a clock from another board or a packed-FP32 figure entered as the vector rate fail here.
    for card in _cards():
        lanes = FP32_LANES[_fact(card, "compute_capability")]
        sms, mhz = _fact(card, "multiprocessors"), _fact(card, "boost_clock_mhz")
        per_board = _fact(card, "devices_per_board") or 1
        expected = 2 * sms * lanes * mhz * 1e6 / 1e12
        assert _value(card, "compute.cuda.fp32") == pytest.approx(expected, rel=0.03), \
            f"{card['key']}: {_value(card, 'compute.cuda.fp32')} vs {expected:.1f} ({per_board} dies)"


_DERIVED_CLOCK = re.compile(r"derived[^:]*:\D*([\d][\d.,]*) TFLOPS[^/(]*/ \((\d+) SMs x (\d+) FLOP/clk\)")


def test_derived_clocks_reproduce_their_arithmetic():
    # A clock the vendor does not print is derived from a printed rate; the note shows the division, and the
    # SM count in it must be the card's own.
    checked = 0
    for card in _cards():
        for name in ("boost_clock_mhz", "tensor_clock_mhz"):
            entry = card["facts"].get(name)
            m = entry and _DERIVED_CLOCK.search(entry.get("note", ""))
            if m:
                tflops, sms, per_clock = _number(m.group(1)), int(m.group(2)), int(m.group(3))
                assert sms == _fact(card, "multiprocessors"), (card["key"], name)
                assert entry["value"] == pytest.approx(tflops * 1e6 / (sms * per_clock), rel=0.005), (card["key"], name)
                checked += 1
    assert checked >= 15


def test_pending_per_clock_rates_agree_with_peaks():
    # The test-local rates stand in only where facts/peaks.py has no entry; once it has one, they must agree.
    for arch, rates in PENDING_PER_CLOCK.items():
        for kind, rate in rates.items():
            known = peaks.per_clock_rate(arch, kind)
            assert known is None or known == rate, (arch, kind, known, rate)
    archs = {_fact(c, "compute_capability") for c in _cards()}
    assert {"10.0", "12.0"} <= archs


def test_new_cards_against_their_documents():
    t4, l4, a10 = (machine_model.card(k) for k in ("t4", "l4", "a10"))
    assert (_value(t4, "compute.tensor.fp16.acc32"), _value(t4, "compute.tensor.int8.acc32")) == (65, 130)
    assert _value(t4, "memory.hbm") == 300 and _fact(t4, "tdp_w") == 70 and _fact(t4, "pcie_generation") == 3
    assert (_value(l4, "compute.tensor.fp16.acc16"), _value(l4, "compute.tensor.fp8.acc16")) == (121, 242)
    assert (_fact(l4, "multiprocessors"), _fact(l4, "boost_clock_mhz"), _fact(l4, "l2_cache_mib")) == (58, 2040, 48.0)
    assert (_value(a10, "compute.tensor.fp16.acc32"), _value(a10, "memory.hbm"), _fact(a10, "tdp_w")) == (125, 600, 150)
    nvl = machine_model.card("h100-nvl")
    assert (_value(nvl, "compute.tensor.fp16.acc32"), _value(nvl, "compute.tensor.fp8.acc32")) == (835.5, 1670.5)
    assert (_value(nvl, "memory.hbm"), _fact(nvl, "memory_gb"), _fact(nvl, "boost_clock_mhz")) == (3938, 94, 1785)
    for key, gb, bw in (("gh200", 96, 4000), ("gh200-144g", 144, 4900)):
        gh = machine_model.card(key)
        assert (_fact(gh, "memory_gb"), _value(gh, "memory.hbm"),
                _value(gh, "compute.tensor.fp16.acc32")) == (gb, bw, 990)
    b200 = machine_model.card("b200")
    assert (_value(b200, "compute.tensor.fp16.acc32"), _value(b200, "compute.tensor.fp8.acc32")) == (2250, 4500)
    assert (_value(b200, "memory.hbm"), _fact(b200, "memory_gb"),
            _fact(b200, "gpu_link_gbs_total")) == (7700, 180, 1800)
    r5090 = machine_model.card("rtx5090")
    assert (_value(r5090, "compute.tensor.fp16.acc16"), _value(r5090, "compute.tensor.fp16.acc32")) == (419, 209.5)
    assert (_fact(r5090, "multiprocessors"), _fact(r5090, "boost_clock_mhz"),
            _value(r5090, "memory.hbm")) == (170, 2407, 1792)


def test_the_a10g_is_not_given_the_a10s_figures():
    # AWS's A10G differs from the A10 (more SMs, other clocks); no vendor document read gives its figures.
    assert datasheets.datasheet_for("NVIDIA A10G") is None
    assert "A10G" in machine_model.card("a10")["notes"] and "not" in machine_model.card("a10")["notes"]
    assert all(key != "a10g" for key in machine_model.card_keys())
