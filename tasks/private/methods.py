"""The private training loops: DP-SGD (Opacus), multi-clip DP-SGD and MaskDP-SGD.

All three share the recipe (:class:`Recipe`): Poisson sampling with q = 1 / ⌈n / B⌉ (Opacus's
``1 / len(data_loader)``), ⌈n / B⌉ steps per epoch, flat clipping to C, Gaussian noise σC on the
sum, division by the expected batch qn, plain SGD with momentum — n the public size
(``private.public_size``), not the private N, so q, the steps and the update's scale reveal nothing
of N under add/remove (Opacus's own normaliser, int(N / ⌈N / B⌉), did). σ is calibrated once for the
target ε over all steps (:func:`tasks.private.accounting.calibrate`), so the three methods at one
ε and the same recipe add the same noise. No augmentation and no dropout while training
privately (paper 001 §5.3: the noise regularises).

Every Poisson sample and noise tensor is drawn from a :class:`tasks.core.dp_randomness.DpStream`
(256 bits of OS entropy unless ``privacy.randomness: seeded``), never from torch's generators, whose
CPU state keeps 32 bits of a seed; Opacus draws through :mod:`tasks.privacy.opacus_randomness`.

- ``dp_sgd``: Opacus ``PrivacyEngine.make_private`` and ``BatchMemoryManager``
  (physical batches of ``physical_batch_size`` inside the Poisson-sampled logical batch);
  per-sample gradients by ``private.grad_sample_mode``: ``ew`` (PyTorch's ExpandedWeights, the
  default: on this 3-D CNN 1.9-2.5× a non-private step, against 3.9-4.7× for Opacus's ``hooks``,
  whose Conv3d unfolding is mostly copies; the three agree to 1e-6, tested).
- ``multiclip`` (Luo et al., cited in paper 000): the unit is the video; its gradient is the mean
  over its K clips, clipped and noised once — K clips cost no more privacy than one.
- ``maskdp`` (paper 001, Algorithm 1): the private-token view's gradient is clipped and noised,
  the public-token view's is added noise-free (lines 6-11): unclipped as printed, or clipped per video to
  ``private.public_max_grad_norm`` (free: public pixels; see :func:`_public_sum`). Two departures from the
  algorithm as printed, both needed for the guarantee: (1) the public gradient is summed over a
  batch drawn *independently* of the private Poisson sample (Lemma 1 of paper 001 assumes the two
  independent; summed over the same batch, the noise-free public term shows who was sampled and
  amplification by subsampling is lost); (2) the relation is **replace-one** (Definition 2 swaps one
  video's private tokens), accounted with PLD, not Theorem 1's add/remove RDP (kept as the paper's).

Units (``private.unit``): ``video`` samples and clips each video; ``person`` samples persons (each
video belongs to its first identity) and clips the *sum* of a sampled person's video gradients as
one unit (McMahan et al. 2018, user-level DP-SGD), so ε holds per person directly. Person units run
through the grouped loop for every method (Opacus has no user-level sampling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tasks.core.dp_randomness import DpStream
from tasks.core.errors import PrivharError
from tasks.core.progress import progress
from tasks.privacy.accounting import ADD_REMOVE, Relation, opacus_engine_epsilon, poisson_schedule
from tasks.privacy.opacus_randomness import StreamPrivacyEngine
from tasks.private.accounting import SgdPrivacy, calibrate
from tasks.private.gradients import (
    Gradients,
    add_noise,
    apply_gradient,
    clip_and_sum,
    per_unit_gradients,
    summed_gradient,
)
from tasks.private.opacus_loop import StepCallback, opacus_epoch
from tasks.video_models.selective import (
    require_sample_independence,
    trainable_parameters,
    without_dropout,
)


@dataclass(frozen=True)
class Recipe:
    epochs: int
    batch_size: int  # expected logical batch B: q = 1 / ceil(N / B)
    physical_batch_size: int  # rows per forward/backward pass (memory), any logical batch
    learning_rate: float
    momentum: float
    max_grad_norm: float  # C
    delta: float
    accountant: str
    grad_sample_mode: str = (
        "ew"  # Opacus per-sample gradients (dp_sgd): ew (ExpandedWeights) | hooks | functorch
    )
    relation: Relation = ADD_REMOVE  # replace-one for MaskDP's masked adjacency
    nproc: int = 1  # dp_sgd: processes of one DPDDP group (tasks.private.distributed)
    public_size: int | None = (
        None  # units q, steps and the normaliser assume (public); None: the data's own count
    )
    public_max_grad_norm: float | None = (
        None  # MaskDP: each video's public-token gradient clipped to it; None: unclipped
    )


@dataclass
class PrivateData:
    """What one method trains on: ``units`` (N, K, ...) private views, labels, and MaskDP's public views.

    For MaskDP, ``has_private`` / ``has_public`` (N,) say whether a video has any token of each
    kind: a video without private tokens contributes no private gradient (nothing of it is
    private), one without public tokens no public gradient. ``owners`` (N,) names the privacy
    unit of each video (0 .. units − 1) when the unit is the person; None: each video is its own.
    """

    units: torch.Tensor
    labels: torch.Tensor
    public: torch.Tensor | None = None  # (N, ...): the public-token view of each video (maskdp)
    has_private: torch.Tensor | None = None
    has_public: torch.Tensor | None = None
    owners: torch.Tensor | None = None

    def to(self, device: torch.device) -> PrivateData:
        """The same data with every tensor on ``device`` (where the model trains)."""
        move = {
            name: None if value is None else value.to(device) for name, value in vars(self).items()
        }
        return PrivateData(**move)

    @property
    def unit_count(self) -> int:
        """How many privacy units are Poisson-sampled: videos, or persons."""
        return len(self.labels) if self.owners is None else int(self.owners.max()) + 1

    def videos_of(self, chosen_units: torch.Tensor) -> torch.Tensor:
        """The videos of the sampled units, in order."""
        if self.owners is None:
            return chosen_units
        return torch.nonzero(torch.isin(self.owners.cpu(), chosen_units)).flatten()

    def private_weights(self, part: torch.Tensor) -> torch.Tensor:
        return (
            torch.ones(len(part), device=self.labels.device)
            if self.has_private is None
            else self.has_private[part].float()
        )

    def public_weights(self, part: torch.Tensor) -> torch.Tensor:
        return (
            torch.ones(len(part), device=self.labels.device)
            if self.has_public is None
            else self.has_public[part].float()
        )


@dataclass
class Outcome:
    history: list[dict[str, float]]
    privacy: SgdPrivacy
    engine_epsilon: float | None = (
        None  # what Opacus's own PrivacyEngine reports (dp_sgd), beside ours
    )


def schedule(count: int, recipe: Recipe) -> tuple[float, int]:
    """(q, steps) of a run over ``count`` units (videos or persons), from the public size where the recipe names one:
    then neither depends on the private data's size (under add/remove, the size is private)."""
    return poisson_schedule(recipe.public_size or count, recipe.batch_size, recipe.epochs)


def expected_batch(count: int, recipe: Recipe) -> float:
    """The update's normaliser q·n (the expected batch), n the public size where the recipe names one (issue 30:
    Opacus divided by int(N / ceil(N / B)), so the released update's scale revealed N)."""
    rate, _ = schedule(count, recipe)
    return rate * (recipe.public_size or count)


def noise_for(target_epsilon: float, data: PrivateData, recipe: Recipe) -> float:
    """σ for the target ε over the whole run; 0 when no video has a private token (nothing to protect)."""
    if data.has_private is not None and not bool(data.has_private.any()):
        return 0.0
    rate, steps = schedule(data.unit_count, recipe)
    return calibrate(target_epsilon, recipe.delta, rate, steps, recipe.accountant, recipe.relation)


def _optimiser(module: nn.Module, recipe: Recipe) -> torch.optim.SGD:
    return torch.optim.SGD(
        list(trainable_parameters(module).values()),
        lr=recipe.learning_rate,
        momentum=recipe.momentum,
    )


def _sum_by_owner(gradients: Gradients, owners: torch.Tensor | None) -> Gradients:
    """Per-video gradients (B, ...) summed per privacy unit (person): the unit that is clipped."""
    if owners is None:
        return gradients
    _, index = torch.unique(owners, return_inverse=True)
    count = int(index.max()) + 1
    return {
        name: torch.zeros(count, *g.shape[1:], dtype=g.dtype, device=g.device).index_add_(
            0, index, g
        )
        for name, g in gradients.items()
    }


def _private_sum(
    module: nn.Module, data: PrivateData, videos: torch.Tensor, recipe: Recipe
) -> tuple[Gradients, int, float]:
    """Σ over the sampled units of their clipped gradients; how many were clipped; the summed loss."""
    total = {
        name: torch.zeros_like(parameter)
        for name, parameter in trainable_parameters(module).items()
    }
    clipped, loss_sum = 0, 0.0
    # a person's videos go through one physical batch together, so their gradient is clipped as one unit
    parts = [videos] if data.owners is not None else list(videos.split(recipe.physical_batch_size))
    for part in parts:
        if not len(part):
            continue
        weights = data.private_weights(part)
        gradients, losses = per_unit_gradients(module, data.units[part], data.labels[part])
        unit_gradients = {
            name: g * weights.view(-1, *[1] * (g.dim() - 1)) for name, g in gradients.items()
        }
        summed, norms = clip_and_sum(
            _sum_by_owner(unit_gradients, None if data.owners is None else data.owners[part]),
            recipe.max_grad_norm,
        )
        clipped += int((norms > recipe.max_grad_norm).sum())
        total = {name: total[name] + summed[name] for name in total}
        loss_sum += float(losses.sum())
    return total, clipped, loss_sum


def _public_sum(
    module: nn.Module, data: PrivateData, videos: torch.Tensor, recipe: Recipe
) -> Gradients:
    """Algorithm 1 line 6: the public-token views' loss gradient, summed (on its own batch).

    Unclipped as printed; with ``recipe.public_max_grad_norm`` each video's is clipped to it. Clipping public
    gradients costs no privacy, and it keeps the noise-free public term from outweighing the clipped private
    one (at ε = ∞ on the embedded data, head only: 74 % unclipped, 86 % clipped to C, against 83 % for the same
    views trained without any clipping; at ε = 0.5 the unclipped term helps more: 52 % against 42 %).
    """
    assert data.public is not None
    total = {
        name: torch.zeros_like(parameter)
        for name, parameter in trainable_parameters(module).items()
    }
    for part in videos.split(recipe.physical_batch_size):
        if recipe.public_max_grad_norm is not None:
            if len(part):
                gradients, _ = per_unit_gradients(
                    module, data.public[part].unsqueeze(1), data.labels[part]
                )
                weights = data.public_weights(part)
                summed, _ = clip_and_sum(
                    {
                        name: g * weights.view(-1, *[1] * (g.dim() - 1))
                        for name, g in gradients.items()
                    },
                    recipe.public_max_grad_norm,
                )
                total = {name: total[name] + summed[name] for name in total}
            continue
        public_weights = data.public_weights(part)

        def public_loss(
            part: torch.Tensor = part, weights: torch.Tensor = public_weights
        ) -> torch.Tensor:
            return (
                F.cross_entropy(module(data.public[part]), data.labels[part], reduction="none")
                * weights
            ).sum()

        public = summed_gradient(module, public_loss)
        total = {name: total[name] + public[name] for name in total}
    return total


def _grouped_gradient(
    module: nn.Module,
    data: PrivateData,
    recipe: Recipe,
    noise_multiplier: float,
    streams: tuple[DpStream, DpStream | None],
    rate: float,
) -> tuple[int, int, float]:
    """One step's update set as the parameters' gradients: the Poisson sample's clipped sum plus N(0, σ²C²), over the
    expected batch; MaskDP adds the mean public gradient of its own Poisson sample of videos at the same rate.
    Returns (units sampled, clipped, loss sum)."""
    stream, public_stream = streams
    chosen = stream.poisson_sample(data.unit_count, rate)
    private, clipped, loss = _private_sum(module, data, data.videos_of(chosen), recipe)
    normaliser = expected_batch(data.unit_count, recipe)
    noised = add_noise(private, noise_multiplier, recipe.max_grad_norm, stream)
    total = {name: g / normaliser for name, g in noised.items()}
    if data.public is not None and public_stream is not None:
        videos = len(data.labels)
        public = _public_sum(module, data, public_stream.poisson_sample(videos, rate), recipe)
        total = {name: total[name] + public[name] / (rate * videos) for name in total}
    apply_gradient(module, total, 1.0)
    return len(chosen), clipped, loss


def train_grouped(
    module: nn.Module,
    data: PrivateData,
    recipe: Recipe,
    noise_multiplier: float,
    stream: DpStream,
    public_stream: DpStream | None = None,
    on_step: StepCallback | None = None,
) -> Outcome:
    """Multi-clip DP-SGD (``data.public`` None) or MaskDP-SGD: the step of :mod:`tasks.private.gradients`.

    ``stream`` draws the private Poisson sample and the noise; ``public_stream`` (MaskDP) draws the
    public batch, independently of the private one. ``on_step`` sees every iterate (progress, audits).
    """
    require_sample_independence(module)
    rate, steps = schedule(data.unit_count, recipe)
    steps_per_epoch = steps // recipe.epochs
    optimiser = _optimiser(module, recipe)
    without_dropout(module)
    if data.public is not None and public_stream is None:
        raise PrivharError(
            "MaskDP needs a public_stream: the public batch must be drawn independently of the private one"
        )
    history, step = [], 0
    bar = progress(
        steps_per_epoch * recipe.epochs,
        "private training" if data.public is None else "MaskDP training",
    )
    for epoch in range(1, recipe.epochs + 1):
        clipped, seen, loss_sum = 0, 0, 0.0
        for _ in range(steps_per_epoch):
            sampled, step_clipped, step_loss = _grouped_gradient(
                module, data, recipe, noise_multiplier, (stream, public_stream), rate
            )
            optimiser.step()
            optimiser.zero_grad(set_to_none=True)
            clipped, seen, loss_sum = clipped + step_clipped, seen + sampled, loss_sum + step_loss
            step += 1
            bar.update(1)
            if on_step is not None:
                on_step(step, sampled, module)
        history.append(
            {
                "epoch": epoch,
                "loss": loss_sum / max(seen, 1),
                "clipped_fraction": clipped / max(seen, 1),
                "sampled": seen,
            }
        )
        bar.set_postfix(epoch=epoch, loss=f"{history[-1]['loss']:.3f}")
    bar.close()
    return Outcome(
        history,
        SgdPrivacy(noise_multiplier, rate, steps, recipe.delta, recipe.accountant, recipe.relation),
    )


OPACUS_ACCOUNTANTS = ("prv", "rdp", "gdp")


def _train_dp_sgd_processes(
    module: nn.Module,
    data: PrivateData,
    recipe: Recipe,
    noise_multiplier: float,
    noise: DpStream,
    sampling: DpStream,
    device: torch.device,
) -> Outcome:
    """:func:`train_dp_sgd` in ``recipe.nproc`` processes (DPDDP): the same σ, q and steps, so the same ε.

    Rank 0 adds noise from ``noise``; each rank draws its share of the Poisson sample from its own
    child of ``sampling``: secret when the streams are.
    """
    from tasks.private.distributed import train_dp_sgd_processes

    rate, steps = schedule(len(data.labels), recipe)
    record = train_dp_sgd_processes(
        module,
        data.units[:, 0],
        data.labels,
        nproc=recipe.nproc,
        noise_multiplier=noise_multiplier,
        physical_batch_size=recipe.physical_batch_size,
        epochs=recipe.epochs,
        learning_rate=recipe.learning_rate,
        momentum=recipe.momentum,
        max_grad_norm=recipe.max_grad_norm,
        grad_sample_mode=recipe.grad_sample_mode,
        accountant=recipe.accountant if recipe.accountant in OPACUS_ACCOUNTANTS else "prv",
        noise=noise,
        sampling=sampling.spawn(recipe.nproc),
        device=device,
        steps_per_epoch=steps // recipe.epochs,
        expected_batch_size=expected_batch(len(data.labels), recipe),
    )
    module.to(device)
    return Outcome(
        record["history"],
        SgdPrivacy(
            record["noise_multiplier"],
            rate,
            steps,
            recipe.delta,
            recipe.accountant,
            recipe.relation,
        ),
        engine_epsilon=opacus_engine_epsilon(
            record["mechanism"], tuple(record["history_accountant"]), recipe.delta
        ),
    )


def _made_private(
    engine: StreamPrivacyEngine,
    module: nn.Module,
    data: PrivateData,
    recipe: Recipe,
    noise_multiplier: float,
    device: torch.device,
) -> tuple[Any, Any, DataLoader]:
    """Opacus's ``make_private`` over one clip a video: Poisson batches, flat clipping to C, σ·C noise."""
    loader = DataLoader(
        TensorDataset(data.units[:, 0].cpu(), data.labels.cpu()),
        batch_size=recipe.batch_size,
        pin_memory=device.type == "cuda",
    )
    without_dropout(module)
    return engine.make_private(
        module=module,
        optimizer=_optimiser(module, recipe),
        data_loader=loader,
        noise_multiplier=noise_multiplier,
        max_grad_norm=recipe.max_grad_norm,
        poisson_sampling=True,
        grad_sample_mode=recipe.grad_sample_mode,
    )


def train_dp_sgd(
    module: nn.Module,
    data: PrivateData,
    recipe: Recipe,
    noise_multiplier: float,
    noise: DpStream,
    sampling: DpStream,
    on_step: StepCallback | None = None,
) -> Outcome:
    """DP-SGD with Opacus at ``noise_multiplier`` (σ, calibrated once by the caller: :func:`noise_for`): ``make_private``
    (Poisson sampling) and ``BatchMemoryManager``.

    The Poisson batches come from ``sampling`` and the noise from ``noise``
    (:class:`tasks.privacy.opacus_randomness.StreamPrivacyEngine`), both drawn on the CPU; on a GPU the
    batches and the noise are moved there. ``on_step`` (one process) sees every iterate (audits).
    """
    require_sample_independence(module)
    device = next(module.parameters()).device
    if recipe.nproc > 1:
        return _train_dp_sgd_processes(
            module, data, recipe, noise_multiplier, noise, sampling, device
        )
    rate, steps = schedule(len(data.labels), recipe)
    engine = StreamPrivacyEngine(
        noise=noise,
        sampling=sampling,
        accountant=recipe.accountant if recipe.accountant in OPACUS_ACCOUNTANTS else "prv",
        steps_per_epoch=steps // recipe.epochs,
        expected_batch_size=expected_batch(len(data.labels), recipe),
    )
    private_module, optimiser, private_loader = _made_private(
        engine, module, data, recipe, noise_multiplier, device
    )
    history = []
    bar = progress(recipe.epochs, "DP-SGD (Opacus)", "epoch")
    try:
        for epoch in range(1, recipe.epochs + 1):
            loss_sum, seen, empty = opacus_epoch(
                private_module,
                module,
                optimiser,
                private_loader,
                recipe.physical_batch_size,
                device,
                on_step,
            )
            loss = loss_sum / max(seen, 1)
            history.append({"epoch": epoch, "loss": loss, "sampled": seen, "empty_batches": empty})
            bar.set_postfix(loss=f"{history[-1]['loss']:.3f}")
            bar.update(1)
    finally:
        bar.close()
        private_module.remove_hooks()
    sigma = float(optimiser.noise_multiplier)
    privacy = SgdPrivacy(sigma, rate, steps, recipe.delta, recipe.accountant, recipe.relation)
    accountant = engine.accountant  # Opacus's own count of the same steps
    history_of_steps = tuple(tuple(step) for step in accountant.history)
    engine_epsilon = opacus_engine_epsilon(accountant.mechanism(), history_of_steps, recipe.delta)
    return Outcome(history, privacy, engine_epsilon=engine_epsilon)
