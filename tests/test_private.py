"""Private training: clipping, multi-clip, MaskDP and their ε, on small modules with known gradients."""

from __future__ import annotations

import copy
from pathlib import Path

import dp_accounting
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tasks.core.dp_randomness import DpStream
from tasks.core.errors import PrivharError
from tasks.privacy.accounting import ADD_REMOVE, sampled_gaussian_epsilon
from tasks.private.accounting import SgdPrivacy, calibrate
from tasks.private.gradients import clip_and_sum, per_unit_gradients
from tasks.private.methods import (
    PrivateData,
    Recipe,
    noise_for,
    schedule,
    train_dp_sgd,
    train_grouped,
)
from tasks.private.tokens import public_token_map, token_views
from tasks.video_models.models import create_video_classifier
from tasks.video_models.selective import select_trainable, trainable_count

RECIPE = Recipe(
    epochs=2,
    batch_size=8,
    physical_batch_size=3,
    learning_rate=0.5,
    momentum=0.0,
    max_grad_norm=0.4,
    delta=1e-4,
    accountant="rdp",
)


def tiny_data(count: int = 8, clips: int = 1, seed: int = 0) -> PrivateData:
    generator = torch.Generator().manual_seed(seed)
    return PrivateData(
        torch.randn(count, clips, 6, generator=generator) * 3,
        torch.randint(0, 3, (count,), generator=generator),
    )


def tiny_head(seed: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(6, 3)


def manual_gradients(
    module: nn.Module, inputs: torch.Tensor, labels: torch.Tensor
) -> list[dict[str, torch.Tensor]]:
    """The reference: one autograd call per unit (mean loss over its clips)."""
    out = []
    for clips, label in zip(inputs, labels):
        module.zero_grad()
        F.cross_entropy(module(clips), label.expand(len(clips))).backward()
        out.append({name: parameter.grad.clone() for name, parameter in module.named_parameters()})
    return out


def test_per_sample_clipping_matches_a_per_example_loop():
    module, data = tiny_head(), tiny_data()
    reference = manual_gradients(module, data.units, data.labels)
    norms = [torch.cat([g.flatten() for g in grads.values()]).norm() for grads in reference]
    assert max(norms) > RECIPE.max_grad_norm  # some sample is clipped
    summed, measured = clip_and_sum(
        per_unit_gradients(module, data.units, data.labels)[0], RECIPE.max_grad_norm
    )
    assert torch.allclose(measured, torch.stack(norms), atol=1e-5)
    for name in summed:
        expected = sum(
            grads[name] * min(1.0, RECIPE.max_grad_norm / (float(norm) + 1e-6))
            for grads, norm in zip(reference, norms)
        )
        assert torch.allclose(summed[name], expected, atol=1e-5)


def test_opacus_update_with_zero_noise_is_the_clipped_gradient():
    """One sample, norm above C, noise 0, q = 1: Opacus's DP-SGD step moves θ by −lr · clipped gradient."""
    module, data = tiny_head(), tiny_data(count=1)
    (gradient,) = manual_gradients(module, data.units, data.labels)
    norm = torch.cat([g.flatten() for g in gradient.values()]).norm()
    assert norm > RECIPE.max_grad_norm
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    before = copy.deepcopy(module.state_dict())
    optimiser = torch.optim.SGD(module.parameters(), lr=RECIPE.learning_rate)
    private, optimiser, loader = PrivacyEngine(accountant="rdp").make_private(
        module=module,
        optimizer=optimiser,
        data_loader=DataLoader(TensorDataset(data.units[:, 0], data.labels), batch_size=1),
        noise_multiplier=0.0,
        max_grad_norm=RECIPE.max_grad_norm,
        poisson_sampling=False,
    )
    F.cross_entropy(private(data.units[:, 0]), data.labels).backward()
    optimiser.step()
    private.remove_hooks()
    for name, value in module.state_dict().items():
        expected = before[name] - RECIPE.learning_rate * gradient[name] * RECIPE.max_grad_norm / (
            float(norm) + 1e-6
        )
        assert torch.allclose(value, expected, atol=1e-6)


def test_multiclip_k1_is_dp_sgd_and_the_video_gradient_is_the_clip_mean():
    data = tiny_data(clips=3)
    module = tiny_head()
    per_video = per_unit_gradients(module, data.units, data.labels)[0]
    per_clip = [per_unit_gradients(module, data.units[:, [k]], data.labels)[0] for k in range(3)]
    for name in per_video:
        assert torch.allclose(per_video[name], sum(clip[name] for clip in per_clip) / 3, atol=1e-6)
    # K = 1 through the grouped loop with σ = 0 equals Opacus DP-SGD with σ = 0 on the same full batches (q = 1)
    single = PrivateData(data.units[:, :1], data.labels)
    recipe = Recipe(**{**RECIPE.__dict__, "batch_size": 100, "physical_batch_size": 100})
    grouped = tiny_head()
    train_grouped(grouped, single, recipe, noise_multiplier=0.0, stream=DpStream.seeded(0))
    opacus = tiny_head()
    reference_step(opacus, single, recipe)
    for (name, a), b in zip(grouped.state_dict().items(), opacus.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5), name


def reference_step(module: nn.Module, data: PrivateData, recipe: Recipe) -> None:
    """Opacus with σ = 0 on full batches for recipe.epochs steps (q = 1)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    optimiser = torch.optim.SGD(
        module.parameters(), lr=recipe.learning_rate, momentum=recipe.momentum
    )
    loader = DataLoader(TensorDataset(data.units[:, 0], data.labels), batch_size=len(data.labels))
    private, optimiser, loader = PrivacyEngine(accountant="rdp").make_private(
        module=module,
        optimizer=optimiser,
        data_loader=loader,
        noise_multiplier=0.0,
        max_grad_norm=recipe.max_grad_norm,
        poisson_sampling=False,
    )
    for _ in range(recipe.epochs):
        for inputs, labels in loader:
            optimiser.zero_grad()
            F.cross_entropy(private(inputs), labels).backward()
            optimiser.step()
    private.remove_hooks()


def maskdp_data(seed: int = 0, private: bool = True, public: bool = True) -> PrivateData:
    data = tiny_data(seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    views = torch.randn(len(data.labels), 6, generator=generator)
    count = len(data.labels)
    return PrivateData(
        data.units,
        data.labels,
        public=views,
        has_private=torch.full((count,), private),
        has_public=torch.full((count,), public),
    )


def test_maskdp_without_noise_or_clipping_is_sgd_on_both_token_losses():
    data = maskdp_data()
    recipe = Recipe(
        **{
            **RECIPE.__dict__,
            "batch_size": 100,
            "physical_batch_size": 5,
            "max_grad_norm": 1e9,
            "epochs": 3,
        }
    )
    masked = tiny_head()
    train_grouped(
        masked,
        data,
        recipe,
        noise_multiplier=0.0,
        stream=DpStream.seeded(0),
        public_stream=DpStream.seeded(1),
    )
    plain = tiny_head()
    optimiser = torch.optim.SGD(plain.parameters(), lr=recipe.learning_rate)
    for _ in range(recipe.epochs):
        optimiser.zero_grad()
        loss = F.cross_entropy(
            plain(data.units[:, 0]), data.labels, reduction="sum"
        ) + F.cross_entropy(plain(data.public), data.labels, reduction="sum")
        (loss / len(data.labels)).backward()
        optimiser.step()
    for a, b in zip(masked.parameters(), plain.parameters()):
        assert torch.allclose(a, b, atol=1e-5)


def test_maskdp_public_gradient_is_clipped_per_video_when_bounded():
    """private.public_max_grad_norm: each video's public-token gradient clipped to it (a per-video loop is the reference);
    None keeps Algorithm 1's unclipped sum."""
    from tasks.private.methods import _public_sum

    data = maskdp_data()
    data.has_public = torch.tensor([True, False] * (len(data.labels) // 2))
    videos = torch.arange(len(data.labels))
    bound = 0.05
    module = tiny_head()
    clipped = _public_sum(
        module, data, videos, Recipe(**{**RECIPE.__dict__, "public_max_grad_norm": bound})
    )
    expected = {name: torch.zeros_like(p) for name, p in module.named_parameters()}
    for index, gradient in enumerate(
        manual_gradients(module, data.public.unsqueeze(1), data.labels)
    ):
        if not data.has_public[index]:
            continue
        norm = torch.sqrt(sum(g.pow(2).sum() for g in gradient.values()))
        assert norm > bound  # every video is clipped here: the test sees the clipping
        for name in expected:
            expected[name] += gradient[name] * bound / norm
    assert all(torch.allclose(clipped[name], expected[name], atol=1e-6) for name in expected)
    unclipped = _public_sum(module, data, videos, RECIPE)
    norm = torch.sqrt(sum(g.pow(2).sum() for g in unclipped.values()))
    assert norm > bound * int(data.has_public.sum())  # as printed: no bound


def test_a_head_trained_on_standardised_features_folds_into_the_same_logits():
    """tasks.video_models.head_features: (W, b) on (x − m)/s equals the folded head on x; the statistics of the given features."""
    from tasks.video_models.head_features import (
        feature_statistics,
        fold_standardisation,
        standardise,
    )

    generator = torch.Generator().manual_seed(5)
    features = (
        torch.randn(40, 6, generator=generator) * torch.tensor([1.0, 5.0, 0.1, 2.0, 3.0, 0.0]) + 7.0
    )
    statistics = feature_statistics(features)
    assert (
        torch.allclose(statistics["mean"], features.mean(0)) and statistics["std"][5] == 1.0
    )  # a constant: centred only
    z = standardise(features, statistics)
    assert torch.allclose(z[:, :5].mean(0), torch.zeros(5), atol=1e-5) and torch.allclose(
        z[:, :5].std(0), torch.ones(5), atol=1e-4
    )
    head = tiny_head()
    before = head(z).detach()
    fold_standardisation(head, statistics)
    assert torch.allclose(head(features).detach(), before, atol=1e-4)


def test_a_head_trained_in_the_public_subspace_folds_into_the_full_layer():
    """A k-input head trained on ((x − m)/s)·B (B: the first k public principal directions) folds into the 6-input layer
    with the same logits; it starts at zero; a subspace wider than the features, or a checkpoint without directions,
    is refused naming the parameter."""
    from tasks.video_models.head_features import (
        feature_statistics,
        fold_standardisation,
        standardise,
        training_head,
        with_subspace,
    )

    generator = torch.Generator().manual_seed(6)
    features = (
        torch.randn(50, 6, generator=generator) * torch.tensor([1.0, 5.0, 0.1, 2.0, 3.0, 1.0]) + 3.0
    )
    statistics = with_subspace(feature_statistics(features), 3, Path("public/model.pt"))
    assert statistics["basis"].shape == (6, 3)
    head = tiny_head()
    small = training_head(head, statistics)
    assert small.in_features == 3 and not small.weight.any() and not small.bias.any()
    with torch.no_grad():
        small.weight.copy_(torch.randn(small.weight.shape, generator=generator))
        small.bias.copy_(torch.randn(small.bias.shape, generator=generator))
    before = small(standardise(features, statistics)).detach()
    fold_standardisation(head, statistics, small)
    assert torch.allclose(head(features).detach(), before, atol=1e-4)
    assert training_head(head, feature_statistics(features)) is head  # no basis: the head itself
    with pytest.raises(PrivharError, match="private.public_subspace = 7"):
        with_subspace(feature_statistics(features), 7, Path("public/model.pt"))
    with pytest.raises(PrivharError, match="public/model.pt: holds no public principal directions"):
        with_subspace(
            {"mean": features.mean(0), "std": features.std(0)}, 3, Path("public/model.pt")
        )


def test_the_class_means_subspace_spans_the_public_class_means_and_folds_back():
    """private.public_subspace: class_means: classes − 1 orthonormal directions whose span holds every public class mean
    less their mean (the head's first public gradient); a head trained there folds into the full layer; a checkpoint
    without them is refused naming the parameter."""
    from tasks.video_models.head_features import (
        feature_statistics,
        fold_standardisation,
        standardise,
        training_head,
        with_subspace,
    )

    generator = torch.Generator().manual_seed(7)
    labels = torch.arange(60) % 3
    centres = torch.randn(3, 6, generator=generator) * 4
    features = centres[labels] + torch.randn(60, 6, generator=generator)
    statistics = with_subspace(
        feature_statistics(features, labels), "class_means", Path("public/model.pt")
    )
    basis = statistics["basis"]
    assert basis.shape == (6, 2) and torch.allclose(basis.T @ basis, torch.eye(2), atol=1e-5)
    z = standardise(features, {**statistics, "basis": None})
    means = torch.stack([z[labels == label].mean(0) for label in range(3)])
    spread = means - means.mean(0)
    assert torch.allclose(spread @ basis @ basis.T, spread, atol=1e-4)  # inside the span
    head = tiny_head()
    small = training_head(head, statistics)
    assert small.in_features == 2 and not small.weight.any()
    with torch.no_grad():
        small.weight.copy_(torch.randn(small.weight.shape, generator=generator))
    before = small(standardise(features, statistics)).detach()
    fold_standardisation(head, statistics, small)
    assert torch.allclose(head(features).detach(), before, atol=1e-4)
    with pytest.raises(
        PrivharError, match="public/model.pt: holds no public class-mean directions"
    ):
        with_subspace(feature_statistics(features), "class_means", Path("public/model.pt"))


def test_maskdp_all_private_is_dp_sgd_and_all_public_adds_no_private_term():
    recipe = Recipe(**{**RECIPE.__dict__, "batch_size": 100, "physical_batch_size": 5})
    private_only = tiny_head()
    train_grouped(
        private_only,
        maskdp_data(public=False),
        recipe,
        noise_multiplier=0.7,
        stream=DpStream.seeded(3),
        public_stream=DpStream.seeded(4),
    )
    dp_sgd = tiny_head()
    data = maskdp_data()
    train_grouped(
        dp_sgd,
        PrivateData(data.units, data.labels),
        recipe,
        noise_multiplier=0.7,
        stream=DpStream.seeded(3),
    )
    assert all(torch.equal(a, b) for a, b in zip(private_only.parameters(), dp_sgd.parameters()))


def test_maskdp_all_public_needs_no_noise():
    assert noise_for(1.0, maskdp_data(private=False), RECIPE) == 0.0
    assert noise_for(1.0, maskdp_data(), RECIPE) > 0.5


def test_epsilon_matches_dp_accounting_rdp():
    """Opacus's RDP ε against Google's dp-accounting: Poisson-sampled Gaussian, same q, σ, steps."""
    for sigma, rate, steps, delta in [
        (1.1, 0.01, 1000, 1e-5),
        (0.8, 1 / 38, 380, 1e-4),
        (2.5, 0.1, 50, 1e-4),
    ]:
        ours = sampled_gaussian_epsilon(
            sigma, rate, steps, delta, accountant="rdp", relation=ADD_REMOVE
        )
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(
            dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(sigma)), steps
        )
        theirs = accountant.get_epsilon(delta)
        assert abs(ours - theirs) / theirs < 0.01, (sigma, ours, theirs)


@pytest.mark.parametrize("accountant", ["prv", "pld", "rdp", "gdp"])
@pytest.mark.parametrize("relation", ["add/remove", "replace-one"])
def test_calibrated_noise_reaches_the_target(accountant, relation):
    rate, steps = schedule(600, RECIPE)
    sigma = calibrate(2.0, 1e-4, rate, steps, accountant, relation)
    spent = SgdPrivacy(sigma, rate, steps, 1e-4, accountant, relation).epsilon()
    assert 2.0 * 0.99 <= spent <= 2.0


def test_opacus_dp_sgd_reports_the_calibrated_epsilon():
    torch.manual_seed(0)
    data = tiny_data(count=40)
    recipe = Recipe(**{**RECIPE.__dict__, "delta": 1e-3})
    outcome = train_dp_sgd(
        tiny_head(),
        data,
        recipe,
        noise_multiplier=noise_for(3.0, data, recipe),
        noise=DpStream.seeded(0),
        sampling=DpStream.seeded(1),
    )
    assert 2.97 <= outcome.privacy.epsilon() <= 3.0 and outcome.privacy.steps == 2 * 5
    # Opacus's engine (RDP here) counted the same steps at the same σ
    assert (
        abs(
            outcome.engine_epsilon
            - SgdPrivacy(outcome.privacy.noise_multiplier, 0.2, 10, 1e-3, "rdp").epsilon()
        )
        < 1e-9
    )
    assert len(outcome.history) == 2


def test_opacus_dp_sgd_steps_through_empty_poisson_batches():
    """q = 1/4 over 4 videos: about a third of the 40 batches are empty; each is still a noised step."""
    torch.manual_seed(0)
    recipe = Recipe(**{**RECIPE.__dict__, "epochs": 10, "batch_size": 1, "delta": 1e-3})
    outcome = train_dp_sgd(
        tiny_head(),
        tiny_data(count=4),
        recipe,
        noise_multiplier=noise_for(8.0, tiny_data(count=4), recipe),
        noise=DpStream.seeded(0),
        sampling=DpStream.seeded(1),
    )
    assert (
        sum(record["empty_batches"] for record in outcome.history) > 5
        and outcome.privacy.steps == 40
    )
    assert all(torch.isfinite(torch.tensor(record["loss"])) for record in outcome.history)


def test_opacus_per_sample_gradient_modes_agree_on_the_video_classifier():
    from opacus.grad_sample import get_gsm_class

    torch.manual_seed(0)
    model = create_video_classifier(num_classes=3, width=4, dropout=0.0)
    clips, labels = torch.randn(3, 3, 4, 32, 40), torch.tensor([0, 2, 1])
    found = {}
    for mode in ("ew", "hooks", "functorch"):
        copied = copy.deepcopy(model)
        options = {"force_functorch": True} if mode == "functorch" else {}
        wrapped = get_gsm_class(mode)(copied, batch_first=True, loss_reduction="mean", **options)
        F.cross_entropy(wrapped(clips), labels).backward()
        found[mode] = {
            name: parameter.grad_sample.clone() for name, parameter in copied.named_parameters()
        }
        if mode != "ew":
            wrapped.remove_hooks()
    for name, expected in found["hooks"].items():
        assert expected.shape[0] == 3
        assert torch.allclose(found["ew"][name], expected, atol=1e-6) and torch.allclose(
            found["functorch"][name], expected, atol=1e-6
        )


@pytest.mark.parametrize("train", ["dp_sgd", "grouped"])
def test_a_batch_norm_model_is_refused_in_one_line(train):
    model = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    with pytest.raises(PrivharError, match="has BatchNorm layers .* use GroupNorm or LayerNorm"):
        if train == "dp_sgd":
            train_dp_sgd(
                model,
                tiny_data(),
                RECIPE,
                noise_multiplier=1.0,
                noise=DpStream.seeded(0),
                sampling=DpStream.seeded(1),
            )
        else:
            train_grouped(model, tiny_data(), RECIPE, 1.0, DpStream.seeded(0))


def test_token_map_and_views():
    pixels = torch.zeros(1, 4, 8, 8)
    pixels[0, :, :4, :4] = 1
    pixels[0, :2, 4:, 4:5] = 1  # a quarter of one token: private at threshold 0.5
    public = public_token_map(pixels, (2, 4, 4), 0.5)
    assert (
        public[0, :, :4, :4].all()
        and not public[0, :, 4:, 4:].any()
        and public.float().mean() == 0.25
    )
    clips = torch.randn(1, 3, 4, 8, 8)
    private_view, public_view = token_views(clips, public)
    assert (
        torch.equal(private_view + public_view, clips)
        and (private_view[:, :, :, :4, :4] == 0).all()
    )


def test_selective_tuning_freezes_the_rest():
    model = create_video_classifier(num_classes=4, width=4)
    counts = {
        choice: (len(select_trainable(model, choice)), trainable_count(model))
        for choice in ("all", "head", "norms_and_head", "last_stage_and_head", r"conv_b\.weight$")
    }
    assert counts["head"][0] == 2 and counts["all"][1] == sum(p.numel() for p in model.parameters())
    assert (
        counts["head"][1]
        < counts["norms_and_head"][1]
        < counts["last_stage_and_head"][1]
        < counts["all"][1]
    )
    assert counts[r"conv_b\.weight$"][0] == 3
    with pytest.raises(PrivharError, match="matches no parameter"):
        select_trainable(model, "nothing_like_this")


def test_bench_private_writes_every_timing(tmp_path):
    from click.testing import CliRunner

    from privhar.cli import main

    out = tmp_path / "private.json"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "private",
            "--batch",
            "2",
            "--frames",
            "4",
            "--size",
            "64",
            "64",
            "--width",
            "4",
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    record = json.loads(out.read_text())
    assert record["non_private_seconds"] > 0 and set(record["dp_over_non_private"]) == {
        "ew",
        "hooks",
        "functorch",
    }
    assert set(record["full_dp_over_selective_dp"]) == {
        "norms_and_head",
        "last_stage_and_head",
        "head",
    }
    counts = [
        record[f"dp_sgd_{choice}_trainable_parameters"]
        for choice in ("head", "norms_and_head", "last_stage_and_head", "all")
    ]
    assert counts == sorted(counts) and counts[-1] == record["parameters"]
    machine = record[
        "machine"
    ]  # the device stamp, and the device's own matmul rate measured in the same run
    assert (
        machine["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
        and machine["torch"] == torch.__version__
    )
    assert machine["matmul_gflops_float32"] > 0
    assert record["non_private_matmul_gflop"] == round(
        record["non_private_seconds"] * machine["matmul_gflops_float32"], 2
    )


def test_person_units_sum_a_persons_video_gradients_and_clip_them_once():
    """private.unit: person — one step at q = 1, σ = 0: the update is Σ_person clip(Σ_its videos g_v) / P."""
    data = tiny_data(count=5)
    data.owners = torch.tensor([0, 0, 1, 1, 1])
    recipe = Recipe(**{**RECIPE.__dict__, "epochs": 1, "batch_size": 2, "momentum": 0.0})
    module = tiny_head()
    before = copy.deepcopy(module.state_dict())
    train_grouped(module, data, recipe, 0.0, DpStream.seeded(0))
    reference = manual_gradients(tiny_head(), data.units, data.labels)
    expected = {name: torch.zeros_like(value) for name, value in before.items()}
    for person in (0, 1):
        summed = {
            name: sum(reference[v][name] for v in range(5) if int(data.owners[v]) == person)
            for name in expected
        }
        norm = float(torch.cat([g.flatten() for g in summed.values()]).norm())
        factor = min(1.0, recipe.max_grad_norm / (norm + 1e-6))
        expected = {name: expected[name] + summed[name] * factor for name in expected}
    for name, value in module.state_dict().items():
        assert torch.allclose(
            value, before[name] - recipe.learning_rate * expected[name] / 2, atol=1e-6
        ), name


@pytest.mark.parametrize("path", ["grouped", "opacus"])
def test_the_released_update_does_not_depend_on_the_private_size(path, monkeypatch):
    """Issue 30: under add/remove the training set's size N is private. With a public size n the sampling rate, the steps
    and the normaliser are n's: N = 5 and N = 4 (a video without gradient removed) release the same noise-free update,
    bit for bit. Opacus's own normaliser, int(N / ⌈N / B⌉), would divide by 5 and by 4."""
    import tasks.private.methods as methods

    monkeypatch.setattr(
        methods, "calibrate", lambda *args, **kwargs: 0.0
    )  # σ = 0: the update's scale in plain sight

    def first_update(videos: int) -> torch.Tensor:
        inputs = torch.zeros(videos, 1, 2)
        inputs[0, 0, 0] = 1.0
        data = PrivateData(inputs, torch.zeros(videos, dtype=torch.long))
        module = nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            module.weight.zero_()
        recipe = Recipe(
            epochs=1,
            batch_size=4,
            physical_batch_size=8,
            learning_rate=1.0,
            momentum=0.0,
            max_grad_norm=1.0,
            delta=1e-3,
            accountant="rdp",
            public_size=4,
        )  # q = 1: every video in the one step
        seen: dict[str, torch.Tensor] = {}

        def keep(step: int, sampled: int, trained: nn.Module) -> None:
            seen.setdefault("weight", trained.weight.detach().clone())

        if path == "grouped":
            train_grouped(module, data, recipe, 0.0, DpStream.seeded(1), on_step=keep)
        else:
            train_dp_sgd(
                module,
                data,
                recipe,
                noise_for(1.0, data, recipe),
                DpStream.seeded(1),
                DpStream.seeded(2),
                on_step=keep,
            )
        return seen["weight"]

    five, four = first_update(5), first_update(4)
    assert five.abs().sum() > 0 and torch.equal(five, four)
