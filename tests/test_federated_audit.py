"""The one-run audit of a federated release (tasks/federated/audit.py) at small scale: the canaries leave the real
videos' training as released, the audit holds on the clients' DP-SGD as built, and catches a client whose noise is
an eighth of what its accountant assumes (seeded: reproducible, not private)."""

from __future__ import annotations

import copy

import pytest
import torch

from tasks.core.dp_randomness import DpStream
from tasks.federated.audit import CanaryRows, audit_federation, placement, rows_of, with_canaries
from tasks.federated.client import LocalRecipe, Shard
from tasks.federated.rounds import Federation
from tasks.privacy.federated_accounting import calibrate
from tasks.privacy.gradient_canaries import CANARY_INPUT
from tasks.video_models.head_features import first_trainable_block, head_of, tail_of
from tasks.video_models.models import create_video_classifier
from tasks.video_models.selective import select_trainable

CLASSES, FEATURES = 3, 32  # create_video_classifier(width=4): 4 · 8 features into the head


def head_tail(trainable: str = "head") -> torch.nn.Module:
    torch.manual_seed(0)
    model = create_video_classifier(num_classes=CLASSES, width=4, head_pool="max")
    select_trainable(model, trainable)
    return tail_of(model, first_trainable_block(model))


def shard(count: int, seed: int) -> Shard:
    """Head features (N, C, 1, 1, 1) that tell the classes apart, as the standardised public features do."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % CLASSES
    inputs = torch.randn(count, FEATURES, generator=generator)
    inputs[torch.arange(count), labels] += 2.0
    return Shard(inputs.view(count, FEATURES, 1, 1, 1), labels)


def federation(sigma: float) -> Federation:
    recipe = LocalRecipe(1, 200, 0.5, 0.5, 1.0, sigma, "functorch")
    return Federation(3, 2, 1.0, "fedavg", 1e-4, 11, recipe)


def test_canaries_fill_each_clients_last_batch_first_then_go_round():
    # B = 10: rooms 10·1 − 7 = 3, 10·2 − 20 = 0, 10·2 − 12 = 8
    assert placement([7, 20, 12], 10, 11).tolist() == [0, 0, 0] + [2] * 8
    assert placement([7, 20, 12], 10, 14).tolist()[11:] == [0, 1, 2]
    assert placement([7, 20, 12], 10, 2).tolist() == [0, 0]


def clips(count: int, seed: int) -> Shard:
    generator = torch.Generator().manual_seed(seed)
    return Shard(
        torch.randn(count, 3, 8, 32, 32, generator=generator), torch.arange(count) % CLASSES
    )


@pytest.mark.parametrize("tuning", ["head", "all"])
def test_real_videos_keep_their_logits_and_a_canarys_gradient_lies_in_its_column_and_the_bias(
    tuning,
):
    tail = head_tail(tuning)
    real = shard(6, 0) if tuning == "head" else clips(6, 0)
    wide = CanaryRows(copy.deepcopy(tail), 4, tuple(real.inputs.shape[1:]))
    with torch.no_grad():
        head_of(wide.model).weight[:, FEATURES:] = torch.randn(CLASSES, 4)
    tail.eval(), wide.eval()
    rows = rows_of(real, 4)
    assert torch.allclose(wide(rows.inputs), tail(real.inputs), atol=1e-5)
    both = with_canaries(
        rows, torch.tensor([1, 3]), torch.tensor([True, False]), torch.tensor([0, 2]), 4
    )
    canaries = both.inputs[6:]
    assert canaries[:, -5:].tolist() == [[0, CANARY_INPUT, 0, 0, 1], [0, 0, 0, -CANARY_INPUT, 1]]
    assert not canaries[:, :-5].any() and both.labels[6:].tolist() == [0, 2]
    torch.nn.functional.cross_entropy(wide(canaries[1:]), both.labels[7:]).backward()
    grads = {name: p.grad for name, p in wide.named_parameters() if p.requires_grad}
    head = "model.blocks.4.proj"
    assert grads[f"{head}.bias"].abs().sum() > 0
    column = grads.pop(f"{head}.weight")
    assert (
        column[:, FEATURES + 3].abs().sum() > 0
        and column[:, FEATURES + 3].abs().sum() == column.abs().sum()
    )
    assert all(g is None or not g.any() for name, g in grads.items() if name != f"{head}.bias")


@pytest.mark.parametrize("planted", [False, True])
def test_the_audit_holds_on_the_clients_dp_sgd_and_catches_an_eighth_of_the_noise(planted):
    shards = [shard(40, k) for k in range(3)]
    sigma = calibrate(1.0, 2, 1e-4)  # ε = 1 per client after 2 rounds of 1 local epoch
    ran = federation(sigma / 8 if planted else sigma)
    audited = audit_federation(
        head_tail(), shards, shard(30, 9), ran, 1, DpStream.seeded(5), 480, 0.95
    )
    assert audited.found.canaries == 480 and audited.clipped_share > 0.9
    if planted:  # the accountant still claims σ's ε = 1
        assert audited.found.epsilon_audited > 1.0
    else:
        assert audited.epsilon_claimed == pytest.approx(1.0, abs=1e-4)
        assert audited.found.epsilon_audited <= 1.0


def test_full_fine_tuning_is_audited_through_the_whole_models_clipping():
    """The canaries ride along clips through the whole model's per-sample clipping and noise (ε = 8: ε̂ > 0)."""
    sigma = calibrate(8.0, 2, 1e-4)
    audited = audit_federation(
        head_tail("all"),
        [clips(6, k) for k in range(3)],
        clips(6, 9),
        federation(sigma),
        1,
        DpStream.seeded(5),
        120,
        0.95,
    )
    assert audited.clipped_share > 0.9 and audited.epsilon_claimed == pytest.approx(8.0, abs=1e-3)
    assert 0 < audited.found.epsilon_audited <= 8.0
