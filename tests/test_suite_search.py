"""The default suite's variant searches: the variants that win on the architecture, in their order;
every variant with --full and on architectures the table does not know."""

from dataclasses import dataclass

import torch

from pygpuperf.measure import suite


@dataclass(frozen=True)
class _Backend:
    family: str


NATIVE, TORCH = _Backend("native"), _Backend("torch")


def _planned():
    hbm = [suite.PlannedProbe("memory.hbm.copy", NATIVE, v)
           for v in ("v4.u1.ld-st.t1024", "v8.u2.ld-st.t128", "v16.u1.ld-st.t128", "v16.u1.cg-cs.t128")]
    native = [suite.PlannedProbe("transfer.h2d.pinned", NATIVE, s) for s in ("4KiB", "64KiB", "1MiB", "1GiB")]
    reference = [suite.PlannedProbe("transfer.h2d.pinned", TORCH, s) for s in ("4KiB", "64KiB", "1MiB", "1GiB")]
    other = [suite.PlannedProbe("transfer.bidir.pinned", TORCH, s) for s in ("4KiB", "1GiB")]  # no native twin
    return hbm + native + reference + other


def test_a_known_architecture_tries_the_winners_in_order_and_fewer_reference_sizes(monkeypatch):
    monkeypatch.setattr(suite, "_architecture", lambda device: "9.0")
    kept = suite._default_search(_planned(), torch.device("cuda"))
    assert [p.variant for p in kept if p.name == "memory.hbm.copy"] == [
        "v16.u1.cg-cs.t128", "v16.u1.ld-st.t128", "v8.u2.ld-st.t128"]  # the table's order; the loser is gone
    assert [p.variant for p in kept if p.name == "transfer.h2d.pinned" and p.backend is NATIVE] == [
        "4KiB", "64KiB", "1MiB"]  # the native sweep keeps every size up to the plateau's (256 MiB)
    assert [p.variant for p in kept if p.name == "transfer.h2d.pinned" and p.backend is TORCH] == [
        "64KiB", "1MiB"]
    assert [p.variant for p in kept if p.name == "transfer.bidir.pinned"] == ["4KiB", "1GiB"]
    assert [p.name for p in kept][:3] == ["memory.hbm.copy"] * 3  # probes keep their place in the suite


def test_an_unknown_architecture_and_the_full_flag_search_everything(monkeypatch):
    monkeypatch.setattr(suite, "_architecture", lambda device: "12.0")
    planned = _planned()
    hbm = [p for p in suite._default_search(planned, torch.device("cuda")) if p.name == "memory.hbm.copy"]
    assert len(hbm) == 4
    def names(plan):
        return [(p.name, p.backend.family, p.variant) for p in plan]

    cpu = names(suite.plan(torch.device("cpu"), "all"))
    assert cpu == names(suite.plan(torch.device("cpu"), "all", full=True))  # the table holds no CPU search
