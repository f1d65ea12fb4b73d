"""The one-run audit of a federated release (tasks/federated/audit.py) at small scale: the canaries leave the real
videos' training as released, the audit holds on the clients' DP-SGD as built, and catches a client whose noise is
an eighth of what its accountant assumes (seeded: reproducible, not private)."""

from __future__ import annotations

import pytest
import torch

from tasks.core.head_features import first_trainable_block, head_of, tail_of
from tasks.core.models import create_video_classifier
from tasks.core.randomness import DpStream
from tasks.core.selective import select_trainable
from tasks.federated.audit import (
    audit_federation,
    padded,
    placement,
    trains_head_alone,
    with_canaries,
)
from tasks.federated.client import LocalRecipe, Shard
from tasks.federated.rounds import Federation
from tasks.privacy.federated_accounting import calibrate
from tasks.privacy.gradient_canaries import CANARY_INPUT, widened

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


def test_the_widened_head_gives_the_real_videos_their_released_logits_and_canaries_their_column():
    tail = head_tail()
    real = shard(6, 0)
    wide = tail_of(tail, 0)
    wide.set_submodule("blocks.4.proj", widened(head_of(tail), 4))
    with torch.no_grad():
        head_of(wide).weight[:, FEATURES:] = torch.randn(CLASSES, 4)
    tail.eval(), wide.eval()
    assert torch.allclose(wide(padded(real, 4).inputs), tail(real.inputs), atol=1e-6)
    columns, included = torch.tensor([1, 3]), torch.tensor([True, False])
    both = with_canaries(padded(real, 4), columns, included, torch.tensor([0, 2]), FEATURES)
    canaries = both.inputs[6:].flatten(1)
    assert torch.equal(canaries[:, :FEATURES], torch.zeros(2, FEATURES))
    assert canaries[:, FEATURES:].tolist() == [
        [0, CANARY_INPUT, 0, 0],
        [0, 0, 0, -CANARY_INPUT],
    ] and both.labels[6:].tolist() == [0, 2]
    assert trains_head_alone(tail) and not trains_head_alone(head_tail("all"))


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
