"""DP randomness that cannot be brute-forced (issue 30): no DP path draws from torch's generators, and every
stream of a secure run is keyed with at least 128 bits of OS entropy.

torch's CPU generator is MT19937 seeded with 32 bits of whatever seed it is given: an update's noise can be
found by trying 2^32 seeds. So the training loops below run with every torch random entry point made to fail,
and the streams a secure run creates are recorded and their keys measured. A planted regression (a seeded
stream handed out under the ``secure`` label) must be caught by the same check.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tasks.core.dp_randomness import MIN_KEY_BITS, DpRandomness, DpStream
from tasks.core.item_randomness import derive_seed
from tasks.private.methods import PrivateData, Recipe
from tasks.private.stage import train_one

RECIPE = Recipe(
    epochs=2,
    batch_size=4,
    physical_batch_size=3,
    learning_rate=0.1,
    momentum=0.0,
    max_grad_norm=1.0,
    delta=1e-3,
    accountant="rdp",
)
TORCH_DRAWS = (
    "rand",
    "randn",
    "randint",
    "randperm",
    "normal",
    "bernoulli",
    "multinomial",
    "poisson",
    "rand_like",
    "randn_like",
    "randint_like",
    "manual_seed",
    "seed",
)
TENSOR_DRAWS = (
    "normal_",
    "uniform_",
    "bernoulli_",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
)


class TorchRandomnessUsed(AssertionError):
    """A DP path drew from one of torch's generators."""


def forbid_torch_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every torch random entry point (and a new torch.Generator) raises from here on."""

    def refuse(name: str):
        def refused(*args, **kwargs):
            raise TorchRandomnessUsed(f"torch.{name} was called on a DP path")

        return refused

    for name in TORCH_DRAWS:
        monkeypatch.setattr(torch, name, refuse(name))
    for name in TENSOR_DRAWS:
        monkeypatch.setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
    monkeypatch.setattr(torch, "Generator", refuse("Generator"))


def data(count: int = 12, owners: bool = False, public: bool = False) -> PrivateData:
    generator = torch.Generator().manual_seed(0)
    units = torch.randn(count, 1, 6, generator=generator)
    labels = torch.randint(0, 3, (count,), generator=generator)
    if public:
        return PrivateData(
            units,
            labels,
            public=torch.randn(count, 6, generator=generator),
            has_private=torch.ones(count, dtype=torch.bool),
            has_public=torch.ones(count, dtype=torch.bool),
        )
    return PrivateData(units, labels, owners=torch.arange(count) // 3 if owners else None)


CASES = {  # (method, data): the Opacus path, the grouped loop (video and person units) and MaskDP's public batch
    "opacus dp_sgd": ("dp_sgd", lambda: data()),
    "multiclip": ("multiclip", lambda: data()),
    "person units": ("dp_sgd", lambda: data(owners=True)),
    "maskdp": ("maskdp", lambda: data(public=True)),
}


def secure_run(method: str, private_data: PrivateData, randomness: DpRandomness) -> list[DpStream]:
    """Train one tiny model at ε = 2 with ``randomness``; the DP streams it created."""
    torch.manual_seed(1)
    module = nn.Linear(6, 3)
    created: list[DpStream] = []
    original = DpStream.__init__

    def recording(stream: DpStream, *args, **kwargs) -> None:
        original(stream, *args, **kwargs)
        created.append(stream)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DpStream, "__init__", recording)
        forbid_torch_randomness(patch)
        train_one(method, module, private_data, RECIPE, 2.0, randomness)
    return created


def assert_secret(streams: list[DpStream]) -> None:
    """Every stream private and keyed with at least MIN_KEY_BITS of entropy (measured on its seed sequence)."""
    assert streams, "the run created no DP stream"
    for stream in streams:
        entropy = int(stream.sequence.entropy)
        assert stream.private and stream.key_bits >= MIN_KEY_BITS, (stream.private, stream.key_bits)
        assert entropy >= 2 ** (MIN_KEY_BITS - 16), (
            f"the stream's key holds {entropy.bit_length()} bits"
        )


@pytest.mark.parametrize("case", CASES)
def test_no_dp_path_draws_from_torch_generators_and_every_stream_holds_128_bits(case):
    method, make = CASES[case]
    streams = secure_run(method, make(), DpRandomness("secure", 0))
    assert_secret(streams)
    assert len({int(stream.sequence.entropy) for stream in streams}) == len(
        streams
    )  # each its own key


def test_torch_randomness_on_a_dp_path_is_caught(monkeypatch):
    """The check above can fail: Opacus's own Poisson sampler (torch.rand) and noise (torch.normal) are refused."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    module = nn.Linear(6, 3)
    engine = PrivacyEngine()
    private, optimiser, loader = engine.make_private(
        module=module,
        optimizer=torch.optim.SGD(module.parameters(), lr=0.1),
        data_loader=DataLoader(
            TensorDataset(torch.zeros(8, 6), torch.zeros(8, dtype=torch.long)), batch_size=4
        ),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        poisson_sampling=True,
    )
    forbid_torch_randomness(monkeypatch)
    with pytest.raises(TorchRandomnessUsed, match="torch.rand"):
        next(iter(loader))


def test_a_seeded_stream_under_the_secure_label_is_caught(monkeypatch):
    """The planted regression: ``privacy.randomness: seeded`` behaviour while the label still says secure."""
    monkeypatch.setattr(
        DpRandomness,
        "stream",
        lambda self, *keys: DpStream.seeded(derive_seed(self.base_seed, *keys)),
    )
    randomness = DpRandomness("secure", 0)
    assert randomness.private  # the label a ledger would print
    with pytest.raises(AssertionError):
        assert_secret(secure_run("multiclip", data(), randomness))


def test_secret_seeds_fill_a_philox_key_and_seeded_ones_are_labelled():
    """Video-DPRP's R and noise are keyed by ``DpRandomness.seed``: 128 bits of OS entropy when secure."""
    secure = DpRandomness("secure", 0)
    assert max(secure.seed("dprp-noise", "v").bit_length() for _ in range(16)) > 120
    seeded = DpRandomness("seeded", 0)
    assert not seeded.private and not seeded.stream("x").private
    assert seeded.seed("x") < 2**63 and seeded.stream("x").key_bits < MIN_KEY_BITS


def test_stream_draws_are_what_they_claim():
    """N(0, σ²) noise on the reference's device and dtype; Poisson samples at rate q; children independent."""
    stream = DpStream.secret()
    noise = stream.normal(2.0, torch.zeros(200_000))
    assert (
        noise.dtype == torch.float32
        and abs(float(noise.mean())) < 0.02
        and abs(float(noise.std()) - 2.0) < 0.02
    )
    assert torch.equal(stream.normal(0.0, torch.ones(3)), torch.zeros(3))
    sizes = [len(stream.poisson_sample(1000, 0.1)) for _ in range(400)]
    assert (
        abs(sum(sizes) / len(sizes) - 100) < 2
        and 0.8 * 90 < torch.tensor(sizes, dtype=torch.float64).var() < 1.2 * 90
    )
    first, second = stream.spawn(2)
    assert not torch.equal(first.normal(1.0, torch.zeros(8)), second.normal(1.0, torch.zeros(8)))
    assert first.key != second.key and first.key[0] == second.key[0]  # one entropy, two spawn paths
    a, b = DpStream.seeded(5), DpStream.seeded(5)
    assert torch.equal(a.normal(1.0, torch.zeros(4)), b.normal(1.0, torch.zeros(4)))
    assert math.isclose(len(DpStream.seeded(5).poisson_sample(100_000, 0.5)), 50_000, abs_tol=1_000)


# Issue 58: tests that check the generator a DP path actually draws from, not the label or the seed sequence it keeps.
# OS entropy is made deterministic (a hash counter) and one bit of every os.urandom answer flipped: a key cut to fewer
# bits than the path claims leaves the release unchanged at the bits it dropped.
FLIPPED_BITS = (0, 31, 63, 64, 127, "top")


def deterministic_urandom(flip: int | str | None):
    """An os.urandom stand-in: the n-th call's bytes from SHA-256 of n, with bit ``flip`` of each answer flipped
    (``top``: its highest bit; little-endian, as the paths read their keys)."""
    import hashlib
    import itertools

    calls = itertools.count()

    def urandom(size: int) -> bytes:
        index = next(calls)
        stream = b"".join(
            hashlib.sha256(f"{index}:{block}".encode()).digest() for block in range(size // 32 + 1)
        )
        value = int.from_bytes(stream[:size], "little")
        if flip is not None:
            bit = 8 * size - 1 if flip == "top" else flip
            value ^= (1 << bit) if bit < 8 * size else 0
        return value.to_bytes(size, "little")

    return urandom


def _federated_release() -> torch.Tensor:
    """Two clients, one round of the federated loop as the stage builds it under ``secure`` randomness."""
    from tasks.core.dp_params import FederatedParams
    from tasks.core.params import BaseParams
    from tasks.core.params_files import load_section
    from tasks.federated.client import Shard
    from tasks.federated.federation import federation_of
    from tasks.federated.rounds import in_process, run_rounds
    from tests.conftest import REPO

    params = load_section(REPO / "params.yaml", "federated", FederatedParams).model_copy(
        update={"clients": 2, "rounds": 1, "client_fraction": 1.0, "batch_size": 4}
    )
    federation = federation_of(
        BaseParams(seed=0, workers=1, device="cpu"),
        params,
        1.0,
        "fedavg",
        DpRandomness("secure", 0),
    )
    generator = torch.Generator().manual_seed(0)
    shards = [Shard(torch.randn(8, 6, generator=generator), torch.arange(8) % 3) for _ in range(2)]
    torch.manual_seed(1)
    module = nn.Linear(6, 3)
    result = run_rounds(
        module, federation, [8, 8], in_process(module, shards, federation.recipe), shards[0], 1
    )
    return torch.cat([tensor.flatten() for tensor in result.state.values()])


def _training_release(method: str, make) -> torch.Tensor:
    torch.manual_seed(1)
    module = nn.Linear(6, 3)
    train_one(method, module, make(), RECIPE, 2.0, DpRandomness("secure", 0))
    return torch.cat([parameter.detach().flatten() for parameter in module.parameters()])


def _dprp_release() -> torch.Tensor:
    """``privhar dprp``'s mechanism on a 4-frame clip: a secret R and secret noise, each a 128-bit Philox key."""
    import numpy as np

    from tasks.dprp.single_video import _protected
    from tasks.privacy.dprp_calibration import noise_scales

    frames = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    scales = noise_scales(
        epsilon=8.0,
        delta=1e-4,
        budget_split=0.8,
        k=16,
        d=8 * 8 * 3,
        calibration="paper",
        neighbour="frame",
        secret_projection=True,
        full_rank=True,
    )
    return torch.from_numpy(
        _protected(frames, "clip.avi", DpRandomness("secure", 0), scales, 16, 16)
    )


def _ldp_release() -> torch.Tensor:
    """Randomized response of three owners' codes, each with its own secret generator."""
    import numpy as np

    from tasks.ldp.video import release

    codes = np.arange(3 * 64).reshape(3, 64) % 5
    rows = [{"video_id": f"v{i}"} for i in range(3)]
    return torch.from_numpy(release(codes, rows, 5, 0.5, DpRandomness("secure", 0)))


RELEASES = {
    **{
        case: (lambda method=method, make=make: _training_release(method, make))
        for case, (method, make) in CASES.items()
    },
    "federated clients": _federated_release,
    "video-dprp": _dprp_release,
    "ldp": _ldp_release,
}


@pytest.mark.parametrize("path", RELEASES)
def test_every_bit_of_os_entropy_reaches_the_release(path, monkeypatch):
    """Each DP path run with OS entropy made deterministic gives the same release twice, and a different one when
    one bit of the entropy is flipped at 0, 31, 63, 64, 127 or the key's top bit."""
    import os

    def released(flip):
        monkeypatch.setattr(os, "urandom", deterministic_urandom(flip))
        return RELEASES[path]()

    # first-run work (lazy imports that read os.urandom) before the entropy is counted
    RELEASES[path]()
    reference = released(None)
    assert torch.equal(reference, released(None))  # deterministic entropy: the release repeats
    unmoved = [flip for flip in FLIPPED_BITS if torch.equal(reference, released(flip))]
    assert not unmoved, f"{path}: flipping OS-entropy bit(s) {unmoved} left the release unchanged"


def full_key_state(stream: DpStream) -> dict:
    """The state of a PCG64DXSM built from the stream's whole key: its entropy and spawn path."""
    import numpy as np

    sequence = np.random.SeedSequence(stream.sequence.entropy, spawn_key=stream.sequence.spawn_key)
    return np.random.PCG64DXSM(sequence).state


@pytest.mark.parametrize("path", ["opacus dp_sgd", "maskdp", "federated clients"])
def test_every_streams_generator_is_the_one_its_full_key_builds(path):
    """A stream could keep its 256-bit SeedSequence and still draw from a generator built from 32 bits of it; the
    generator's state when the stream is made must equal one built from the full key (the federated clients'
    own streams included), and each stream must be secret."""
    created: list[tuple[DpStream, dict]] = []
    original = DpStream.__init__

    def recording(stream: DpStream, *args, **kwargs) -> None:
        original(stream, *args, **kwargs)
        created.append((stream, stream._rng.bit_generator.state))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DpStream, "__init__", recording)
        RELEASES[path]()
    assert_secret([stream for stream, _ in created])
    for stream, state in created:
        assert state == full_key_state(stream)
