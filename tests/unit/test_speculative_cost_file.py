"""The step costs kept beside the KV cache: one measurement per model, build, machine and config."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import cast

import pytest

from reame.shared import config
from reame.worker.kv import KvCache
from reame.worker.speculative import cost_file
from reame.worker.speculative.adaptive import StepCosts
from reame.worker.speculative.cost_file import CostKey, decode, encode, load_or_measure
from reame.worker.speculative.setup import Speculation
from tests.unit.fakes import FakeKv, fake_model

KEY = CostKey(
    model="ab" * 32, draft_model="", threads=1, n_batch=512, draft_min=1, draft_max=15,
    llama_cpp="0.3.36", cpu="AMD EPYC 7B13", repack=True,
)
FAST = StepCosts.from_timings({1: 1.0, 2: 1.1, 4: 1.3, 8: 2.0, 16: 3.5})
SLOW = StepCosts.from_timings({1: 1.0, 2: 1.9, 4: 3.8, 8: 9.1, 16: 16.2})


class Measurer:
    """A measurement that returns given costs and counts its calls."""

    def __init__(self, costs: StepCosts) -> None:
        self.costs = costs
        self.calls = 0

    def __call__(self) -> StepCosts:
        self.calls += 1
        return self.costs


# ---- the pure parts ---------------------------------------------------------------------

def test_the_file_round_trips_the_costs_exactly() -> None:
    costs = dataclasses.replace(SLOW, draft=0.123456789012345)
    assert decode(encode(KEY, costs), KEY) == costs


@pytest.mark.parametrize("field", ["model", "draft_model", "threads", "n_batch", "draft_min", "draft_max",
                                   "llama_cpp", "cpu"])
def test_any_other_key_refuses_the_file_and_names_another_one(field: str) -> None:
    other = dataclasses.replace(KEY, **{field: getattr(KEY, field) + (1 if isinstance(getattr(KEY, field), int)
                                                                      else "x")})
    assert decode(encode(KEY, FAST), other) is None
    assert other.file_name() != KEY.file_name()
    assert KEY.file_name() == dataclasses.replace(KEY).file_name()


@pytest.mark.parametrize("data", [
    b"", b"not json", b"[]", b'{"format": 1}',
    encode(KEY, FAST).replace(b'"format": 1', b'"format": 99'),
    encode(KEY, StepCosts(((2, 1.0),))),  # no one-token cost
    encode(KEY, StepCosts(((1, 1.0), (4, 2.0), (2, 1.5)))),  # sizes out of order
    encode(KEY, StepCosts(((1, 1.0), (2, -1.0)))),
    encode(KEY, StepCosts(((1, 1.0),), draft=-1.0)),
])
def test_a_malformed_file_is_refused(data: bytes) -> None:
    assert decode(data, KEY) is None


@pytest.mark.parametrize(("cpuinfo", "machine", "model"), [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: avx2\n\n"
     "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n", "x86_64", "AMD EPYC 7B13"),
    ("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n", "aarch64",
     "CPU implementer 0x41, CPU part 0xd0c"),
    ("", "riscv64", "riscv64"),
    ("", "", "unknown"),
])
def test_the_cpu_model_comes_from_cpuinfo(cpuinfo: str, machine: str, model: str) -> None:
    assert cost_file.cpu_model(cpuinfo, machine) == model


# ---- keeping them on disk -------------------------------------------------------------

def test_the_first_worker_measures_and_every_later_one_reads(tmp_path: Path) -> None:
    first, restarted = Measurer(SLOW), Measurer(FAST)
    assert load_or_measure(tmp_path, KEY, first) == SLOW
    assert load_or_measure(tmp_path, KEY, restarted) == SLOW
    assert (first.calls, restarted.calls) == (1, 0)
    assert [path.name for path in tmp_path.iterdir()] == [KEY.file_name()]  # no partial file left


def test_another_key_measures_again_and_keeps_both(tmp_path: Path) -> None:
    other = dataclasses.replace(KEY, threads=2)
    load_or_measure(tmp_path, KEY, Measurer(SLOW))
    again = Measurer(FAST)
    assert load_or_measure(tmp_path, other, again) == FAST
    assert again.calls == 1
    assert load_or_measure(tmp_path, KEY, Measurer(FAST)) == SLOW
    assert {path.name for path in tmp_path.iterdir()} == {KEY.file_name(), other.file_name()}


def test_two_workers_measuring_together_end_up_with_the_winners_costs(tmp_path: Path) -> None:
    both_measured = threading.Barrier(2, timeout=60)
    results: dict[str, StepCosts] = {}

    def worker(name: str, costs: StepCosts) -> None:
        def measure() -> StepCosts:
            both_measured.wait()  # both have found no file: both will try to publish
            return costs

        results[name] = load_or_measure(tmp_path, KEY, measure)

    threads = [threading.Thread(target=worker, args=args) for args in (("a", SLOW), ("b", FAST))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results["a"] == results["b"]
    assert results["a"] in (SLOW, FAST)
    assert decode((tmp_path / KEY.file_name()).read_bytes(), KEY) == results["a"]
    assert [path.name for path in tmp_path.iterdir()] == [KEY.file_name()]


def test_deleting_the_file_measures_again(tmp_path: Path) -> None:
    load_or_measure(tmp_path, KEY, Measurer(SLOW))
    (tmp_path / KEY.file_name()).unlink()
    assert load_or_measure(tmp_path, KEY, Measurer(FAST)) == FAST


def test_a_damaged_file_is_measured_again_and_replaced(tmp_path: Path) -> None:
    (tmp_path / KEY.file_name()).write_text("{")
    assert load_or_measure(tmp_path, KEY, Measurer(FAST)) == FAST
    assert load_or_measure(tmp_path, KEY, Measurer(SLOW)) == FAST


def test_without_a_directory_each_worker_measures(tmp_path: Path) -> None:
    measurer = Measurer(FAST)
    assert load_or_measure(None, KEY, measurer) == FAST
    assert load_or_measure(None, KEY, measurer) == FAST
    assert measurer.calls == 2


def test_an_unwritable_directory_still_gives_the_measured_costs(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    assert load_or_measure(missing, KEY, Measurer(FAST)) == FAST


# ---- where they are kept -------------------------------------------------------------

def settings(tmp_path: Path, **environ: str) -> config.Config:
    env = {"REAME_CACHE_DIR": str(tmp_path / "cache"), "REAME_SERVER_RUN_DIR": str(tmp_path / "run"), **environ}
    return config.load(environ=env)


def test_they_are_kept_in_the_cache_directory(tmp_path: Path) -> None:
    assert cost_file.directory(settings(tmp_path)) == tmp_path / "cache"
    assert (tmp_path / "cache").is_dir()


def test_without_the_cache_they_are_kept_in_the_run_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        assert cost_file.directory(settings(tmp_path, REAME_CACHE_ENABLED="false")) == tmp_path / "run"
    assert "run directory" in caplog.text


def test_an_unusable_cache_directory_falls_back_to_the_run_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "cache").write_text("a file where the directory should be")
    with caplog.at_level(logging.WARNING):
        assert cost_file.directory(settings(tmp_path)) == tmp_path / "run"
    assert "run directory" in caplog.text


# ---- through calibration --------------------------------------------------------------

def test_calibrating_workers_share_the_kept_costs(tmp_path: Path) -> None:
    first, second = Speculation("lookup", 1, 7), Speculation("lookup", 1, 7)  # type: ignore[arg-type]
    for speculation in (first, second):
        speculation.kept = (tmp_path, dataclasses.replace(KEY, draft_max=7))
    first.calibrate(cast(KvCache, FakeKv(fake_model())), filler=3, n_batch=64)
    kv = FakeKv(fake_model())
    second.calibrate(cast(KvCache, kv), filler=3, n_batch=64)
    assert second.costs == first.costs
    assert kv.decodes == [2]  # only the check that positions can be dropped: nothing was timed
    assert len(kv) == 0  # left as empty as a measurement leaves it: the first request reuses nothing
