"""DP-SGD in 2 gloo processes (Opacus DPDDP) is the single-process mechanism: the same update, the same ε."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.dp_randomness import DpStream
from tasks.core.errors import PrivharError
from tasks.privacy.accounting import opacus_engine_epsilon
from tasks.private.distributed import train_dp_sgd_processes

SIGMA, CLIP, RATE_ONE, MODE = 0.7, 1.0, 8, "ew"


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)


def _model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))


def _single_process(
    model: nn.Module, batch_size: int, epochs: int, noise_seed: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[nn.Module, PrivacyEngine]:
    """The oracle: Opacus in this process, written out here (not privhar's code); only its Gaussian draws are
    taken from the seeded stream rank 0 is given, in the same order (parameter by parameter)."""
    import opacus.optimizers.optimizer as opacus_optimizer

    noise = DpStream.seeded(noise_seed)
    monkeypatch.setattr(
        opacus_optimizer,
        "_generate_noise",
        lambda std, reference, generator=None, secure_mode=False: noise.normal(std, reference),
    )
    inputs, labels = _data()
    engine = PrivacyEngine(accountant="prv")
    private, optimiser, loader = engine.make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=DataLoader(TensorDataset(inputs, labels), batch_size=batch_size),
        noise_multiplier=SIGMA,
        max_grad_norm=CLIP,
        poisson_sampling=True,
    )
    for _ in range(epochs):
        for features, targets in loader:
            optimiser.zero_grad(set_to_none=True)
            F.cross_entropy(private(features), targets).backward()
            optimiser.step()
    private.remove_hooks()
    return model, engine


def _two_processes(model: nn.Module, batch_size: int, epochs: int, noise_seed: int) -> dict:
    inputs, labels = _data()
    steps = math.ceil(len(labels) / batch_size)  # Opacus's schedule, which the oracle uses
    return train_dp_sgd_processes(
        model,
        inputs,
        labels,
        nproc=2,
        noise_multiplier=SIGMA,
        steps_per_epoch=steps,
        expected_batch_size=len(labels) // steps,
        physical_batch_size=8,
        epochs=epochs,
        learning_rate=0.5,
        momentum=0.0,
        max_grad_norm=CLIP,
        grad_sample_mode=MODE,
        accountant="prv",
        noise=DpStream.seeded(noise_seed),
        sampling=DpStream.seeded(3).spawn(2),
    )


def test_two_gloo_processes_make_the_single_process_noised_update(monkeypatch):
    """q = 1 fixes the batch (every video, split over the ranks); rank 0's noise stream is the single process's.

    The noise is added once: were it added on both ranks, the update would differ by a second N(0, σ²C²) draw.
    """
    single, _ = _single_process(
        _model(), batch_size=RATE_ONE, epochs=1, noise_seed=11, monkeypatch=monkeypatch
    )
    distributed = _model()
    record = _two_processes(distributed, batch_size=RATE_ONE, epochs=1, noise_seed=11)
    for (name, a), b in zip(single.named_parameters(), distributed.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert record["history"][0]["sampled"] == 8  # both ranks' halves, all of them at q = 1
    # another noise seed, another update: the match above is the stream's, not an update without noise (the one-process
    # run of seed 12 stands for the two-process one: they were just shown to be one update)
    other_noise, _ = _single_process(
        _model(), batch_size=RATE_ONE, epochs=1, noise_seed=12, monkeypatch=monkeypatch
    )
    assert not all(
        torch.allclose(a, b, atol=1e-6)
        for a, b in zip(distributed.parameters(), other_noise.parameters())
    )


def test_two_processes_are_accounted_as_one_mechanism(monkeypatch):
    """q = 0.5 over 2 epochs: Opacus's accountant on rank 0 holds the single process's (σ, q, steps), hence its ε."""
    _, engine = _single_process(
        _model(), batch_size=4, epochs=2, noise_seed=5, monkeypatch=monkeypatch
    )
    record = _two_processes(_model(), batch_size=4, epochs=2, noise_seed=5)
    assert (
        [tuple(step) for step in engine.accountant.history]
        == record["history_accountant"]
        == [(SIGMA, 0.5, 4)]
    )
    assert opacus_engine_epsilon("prv", tuple(record["history_accountant"]), 1e-5) == pytest.approx(
        engine.get_epsilon(1e-5), rel=1e-9
    )


def test_one_process_or_shared_sampling_streams_are_refused():
    inputs, labels = _data()
    common = {
        "noise_multiplier": SIGMA,
        "steps_per_epoch": 2,
        "expected_batch_size": 4,
        "physical_batch_size": 4,
        "epochs": 1,
        "learning_rate": 0.1,
        "momentum": 0.0,
        "max_grad_norm": CLIP,
        "grad_sample_mode": "ew",
        "accountant": "prv",
        "noise": DpStream.seeded(1),
    }
    with pytest.raises(PrivharError, match="private.nproc = 1: the process group needs 2 or more"):
        train_dp_sgd_processes(
            copy.deepcopy(_model()),
            inputs,
            labels,
            nproc=1,
            sampling=[DpStream.seeded(1)],
            **common,
        )
    with pytest.raises(
        PrivharError, match="2 distinct sampling streams"
    ):  # two ranks drawing the same sample: not Poisson
        train_dp_sgd_processes(
            copy.deepcopy(_model()),
            inputs,
            labels,
            nproc=2,
            sampling=[DpStream.seeded(1), DpStream.seeded(1)],
            **common,
        )


def test_the_stage_trains_dp_sgd_in_two_processes_with_the_single_process_epsilon(
    tiny_decoded, tmp_path
):
    """privhar stage train-private --nproc 2: the models exist and the ledger's ε is the one-process ledger's."""
    import polars as pl
    from conftest import write_params

    from flows.stage_commands import stage_call

    train = stage_call("train")
    train_private = stage_call("train-private")

    params = write_params(
        tmp_path, {"private": {"epsilons": [4.0], "methods": ["dp_sgd"]}, "report": {"seeds": 1}}
    )
    train(
        params_path=params,
        frames=tiny_decoded / "data/decode",
        out=tmp_path / "public",
        report=tmp_path / "reports",
        family="public",
    )
    ledgers = {}
    for nproc in (1, 2):
        train_private(
            params_path=params,
            method="dp_sgd",
            frames=tiny_decoded / "data/decode",
            init=tmp_path / "public",
            out=tmp_path / f"out{nproc}",
            report=tmp_path / f"report{nproc}",
            nproc=nproc,
        )
        ledgers[nproc] = pl.read_csv(tmp_path / f"report{nproc}" / "dp_sgd.csv")
        assert (tmp_path / f"out{nproc}" / "dp_sgd-eps4.0" / "model.pt").is_file()
    columns = ["model", "epsilon", "noise_multiplier", "sample_rate", "steps"]
    assert ledgers[1].select(columns).equals(ledgers[2].select(columns))


def test_each_rank_takes_every_step_and_the_ranks_together_draw_one_poisson_sample():
    """The audit of the sampling: q per video, independent across ranks, ``steps`` batches a rank, empty ones kept."""
    from tasks.private.distributed import rank_sampler

    total, steps, epochs = 10, 4, 3000
    samplers = [rank_sampler(total, rank, 2, steps, DpStream.seeded(100 + rank)) for rank in (0, 1)]
    counts = torch.zeros(total)
    together = torch.zeros(
        2, 2
    )  # joint inclusion of video 0 (rank 0) and video 1 (rank 1) in one step
    empty = 0
    for _ in range(epochs):
        draws = [list(sampler) for sampler in samplers]
        assert [len(batches) for batches in draws] == [steps, steps]  # no rank skips a step
        for first, second in zip(*draws):
            empty += not first
            counts[first + second] += 1
            together[int(0 in first), int(1 in second)] += 1
    rate, trials = 1 / steps, epochs * steps
    tolerance = 5 * (rate * (1 - rate) / trials) ** 0.5
    assert ((counts / trials - rate).abs() < tolerance).all()
    assert empty > 0  # rank 0's five videos all left out: (3/4)^5 of its steps, kept as empty steps
    joint = together[1, 1] / trials
    assert (
        abs(joint - rate * rate) < 5 * (rate * rate / trials) ** 0.5
    )  # independent: not one shared draw
