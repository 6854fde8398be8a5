"""The Lightning and Hugging Face callbacks in real ``Trainer.fit`` / ``Trainer.train`` runs on the
CPU, with a planted CPU-bound input stage (see tests/test_advisor.py for why a user rule finds it)."""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from traceadvisor.advisor import AdvisorFindingsError, AdvisorReport

pl = pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # see tests/conftest.py

# Profile steps 2-4 (skip 1, warm up 1, record 3).
WINDOW = {"skip_first": 1, "wait": 0, "warmup": 1, "active": 3}


class SpinItems:
    """A map-style dataset whose items cost CPU time (built on the training thread: num_workers=0).

    With ``slow``, only the first ``slow`` items do; the others sleep 1 ms, as the host of a
    GPU-bound loop mostly waits, which leaves the CPU to the analysis. Module-level (and not a
    ``Dataset`` subclass, to keep torch out of module scope) so ``ddp_spawn`` can pickle it.
    """

    def __init__(self, n: int, spin: int = 40_000, slow: int | None = None) -> None:
        self.n, self.spin, self.slow = n, spin, slow

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        acc = 0
        if self.slow is None or i < self.slow:
            for k in range(self.spin):
                acc += k
        else:
            time.sleep(0.001)
        return torch.full((16,), float(acc % 7)), torch.zeros(1)


def spin_items(n: int, spin: int = 40_000, slow: int | None = None) -> SpinItems:
    return SpinItems(n, spin, slow)


def module_class(base: type) -> type:
    """A tiny LightningModule class on ``base`` (lightning.pytorch's or pytorch_lightning's)."""

    class TinyModule(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            import torch

            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            import torch

            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            import torch

            return torch.optim.SGD(self.parameters(), lr=0.01)

    TinyModule.__qualname__ = "TinyModule"
    return TinyModule


TinyModule = module_class(pl.LightningModule)  # module-level, so ddp_spawn can pickle it by name


def lightning_module(pkg: Any) -> Any:
    return TinyModule() if pkg is pl else module_class(pkg.LightningModule)()


def planted(report: AdvisorReport) -> Any:
    found = [f for f in report.findings if f.rule == "cpu-input-bound"]
    assert found, [f.rule for f in report.findings]
    return found[0]


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_lightning_fit_reports_through_its_loggers(
    package: str, tmp_path: Path, rules_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib

    from torch.utils.data import DataLoader

    from traceadvisor.integrations.lightning import callback_class

    caplog.set_level(logging.INFO, logger="traceadvisor")
    pl = importlib.import_module(package)
    loggers = importlib.import_module(f"{package}.loggers")
    received: list[AdvisorReport] = []
    callback = callback_class(package)(rules_dir=rules_dir, on_findings=received.append, **WINDOW)
    assert isinstance(callback, pl.Callback)
    trainer = pl.Trainer(
        max_steps=8,
        accelerator="cpu",
        devices=1,
        logger=loggers.CSVLogger(str(tmp_path), name="run"),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(lightning_module(pl), DataLoader(spin_items(64), batch_size=4, num_workers=0))

    assert len(received) == 1 and received == callback.reports
    report = received[0]
    finding = planted(report)
    assert finding.severity.value == "high" and finding.impact is not None and finding.impact.share_pct > 50
    assert [s.step for s in report.steps] == [2, 3, 4]
    # Traces go under the logger's folder: <log_dir>/traceadvisor/cycle1/rank0.json.gz.
    assert report.trace_path == Path(trainer.log_dir) / "traceadvisor" / "cycle1" / "rank0.json.gz"
    assert report.trace_path.is_file()
    # The metrics reached the Lightning logger (CSVLogger writes metrics.csv).
    with (Path(trainer.log_dir) / "metrics.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("traceadvisor/findings_high")]
    assert rows and float(rows[0]["traceadvisor/findings_high"]) == len(report.at_least("high")) >= 1
    assert float(rows[0]["traceadvisor/impact_pct/cpu-input-bound"]) == pytest.approx(finding.impact.share_pct)
    assert any("[high] cpu-input-bound" in r.getMessage() for r in caplog.records)


def test_lightning_fail_on_stops_fit(tmp_path: Path, rules_dir: Path) -> None:
    from torch.utils.data import DataLoader

    from traceadvisor.integrations.lightning import TraceAdvisorCallback

    callback = TraceAdvisorCallback(tmp_path / "traces", rules_dir=rules_dir, fail_on="high", **WINDOW)
    trainer = pl.Trainer(
        max_steps=2000,
        accelerator="cpu",
        logger=False,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(AdvisorFindingsError) as err:
        trainer.fit(lightning_module(pl), DataLoader(spin_items(8000, slow=24), batch_size=4, num_workers=0))
    assert 5 <= trainer.global_step < 2000  # raised in the loop, after the window (steps 2-4) closed
    assert err.value.findings[0].rule == "cpu-input-bound"
    assert (tmp_path / "traces" / "cycle1" / "rank0.json.gz").is_file()


def test_transformers_train_reports_through_trainer_log(
    tmp_path: Path, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from traceadvisor.integrations.transformers import TraceAdvisorCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))

    class Tokens(Dataset[dict[str, Any]]):
        def __len__(self) -> int:
            return 256

        def __getitem__(self, i: int) -> dict[str, Any]:
            acc = 0
            for k in range(40_000):  # the planted CPU-bound input stage
                acc += k
            ids = torch.arange(16) % 64
            return {"input_ids": ids, "labels": ids}

    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=8,
        per_device_train_batch_size=4,
        dataloader_num_workers=0,
        report_to=[],
        save_strategy="no",
        logging_steps=1000,
        disable_tqdm=True,
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    callback = TraceAdvisorCallback.attach(trainer, rules_dir=rules_dir, **WINDOW)
    trainer.train()

    assert len(callback.reports) == 1
    report = callback.reports[0]
    finding = planted(report)
    assert finding.severity.value == "high"
    assert report.trace_path == tmp_path / "hf" / "traceadvisor" / "cycle1" / "rank0.json.gz"
    assert report.trace_path.is_file()
    logged = [h for h in trainer.state.log_history if "traceadvisor/findings_high" in h]
    assert len(logged) == 1
    assert logged[0]["traceadvisor/findings_high"] == len(report.at_least("high")) >= 1
    assert logged[0]["traceadvisor/impact_pct/cpu-input-bound"] == pytest.approx(finding.impact.share_pct)
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def record_delivery(folder: Path, report: AdvisorReport) -> None:
    """on_findings for the processes of ddp_spawn: leave the report where the test can read it."""
    (folder / f"delivered-rank{report.rank}.json").write_text(json.dumps(report.to_dict()))


@pytest.mark.slow  # two spawned processes importing torch and lightning: 15-35 s on 2 busy cores
def test_lightning_ddp_each_rank_writes_its_trace_rank0_reports_and_fail_on_stops_all(
    tmp_path: Path, rules_dir: Path
) -> None:
    from torch.utils.data import DataLoader

    from traceadvisor.integrations.lightning import TraceAdvisorCallback
    from traceadvisor.trace.load import load

    delivered = tmp_path / "delivered"
    delivered.mkdir()
    callback = TraceAdvisorCallback(
        tmp_path / "traces",
        rules_dir=rules_dir,
        on_findings=partial(record_delivery, delivered),
        fail_on="high",
        **WINDOW,
    )
    trainer = pl.Trainer(
        max_steps=40,
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        logger=False,
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    # Rank 0 alone finds the problem; the ranks decide together at the step where the window
    # closed, so both stop there (no rank is left waiting in an all-reduce) and fit raises.
    with pytest.raises(Exception, match="AdvisorFindingsError") as err:
        trainer.fit(TinyModule(), DataLoader(spin_items(400, slow=64), batch_size=4, num_workers=0))
    assert "cpu-input-bound" in str(err.value) or "rank 0 reported findings at or above high" in str(err.value)

    cycle = tmp_path / "traces" / "cycle1"
    assert sorted(p.name for p in cycle.iterdir()) == ["rank0.json.gz", "rank1.json.gz"]
    assert [t.meta.rank for t in load(cycle)] == [0, 1]  # kineto's distributedInfo agrees with the names
    assert [p.name for p in delivered.iterdir()] == ["delivered-rank0.json"]  # rank 0 alone reports
    report = json.loads((delivered / "delivered-rank0.json").read_text())
    assert [t["path"] for t in report["traces"]] == [str(cycle / "rank0.json.gz")]
    assert any(f["rule"] == "cpu-input-bound" and f["severity"] == "high" for f in report["findings"])
