"""The same clients and server as Flower apps (``flwr``, extra ``federated``): ServerApp, ClientApp, simulation.

The logic is :mod:`tasks.federated.rounds` and :mod:`tasks.federated.client`, unchanged: the
ClientApp's ``train`` handler runs :func:`client_round` on the node's own shard, and the
ServerApp's ``main`` runs :func:`run_rounds` with a transport that sends θ_t to the selected nodes as
Flower messages (an ``ArrayRecord`` of the trainable tensors) and reads their masked updates back.
A node says which client it is through its node config (``partition-id``, what Flower's
simulation sets; on a real SuperNode, ``--node-config "partition-id=0 data=/path/shard.pt"``), so
the server first asks every node (a ``query`` message) and addresses clients by that id.

:func:`simulate` runs both on Flower's simulation engine (Ray, on this machine): the same
messages as a deployment, on loopback. Given the same seed it walks the in-process trajectory.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from tasks.core.errors import PrivharError
from tasks.federated.client import ClientResult, LocalRecipe, Shard, client_round
from tasks.federated.rounds import Federation, FederationResult, Tensors, run_rounds

NODE_WAIT_SECONDS = 120


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Any:
    return torch.load(path, weights_only=False)


def make_client_app(module_file: Path, shard_files: list[Path], recipe: LocalRecipe) -> ClientApp:
    """A ClientApp whose node trains its shard (``partition-id`` of its node config, or its ``data`` file)."""
    app = ClientApp()

    def shard_of(context: Context) -> tuple[int, Path]:
        client = int(context.node_config["partition-id"])
        data = context.node_config.get("data")
        return client, Path(str(data)) if data else shard_files[client]

    @app.query()
    def identify(message: Message, context: Context) -> Message:
        client, _ = shard_of(context)
        return Message(RecordDict({"client": ConfigRecord({"id": client})}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        _, data = shard_of(context)
        shard: Shard = _load(str(data))
        broadcast = message.content["arrays"].to_torch_state_dict()
        result = client_round(
            _load(str(module_file)),
            broadcast,
            shard,
            recipe,
            int(message.content["config"]["seed"]),
        )
        metrics = MetricRecord({"count": result.count, "steps": result.steps, "loss": result.loss})
        return Message(
            RecordDict({"arrays": ArrayRecord(torch_state_dict=result.update), "metrics": metrics}),
            reply_to=message,
        )

    return app


def _client_ids(grid: Grid, clients: int) -> dict[int, int]:
    """client id → node id, once ``clients`` nodes have joined."""
    deadline = time.monotonic() + NODE_WAIT_SECONDS
    nodes = list(grid.get_node_ids())
    while len(nodes) < clients:
        if time.monotonic() > deadline:
            raise PrivharError(
                f"flower: {len(nodes)} of federated.clients = {clients} nodes joined in {NODE_WAIT_SECONDS} s"
            )
        time.sleep(1)
        nodes = list(grid.get_node_ids())
    replies = grid.send_and_receive(
        [Message(RecordDict(), dst_node_id=node, message_type="query") for node in nodes]
    )
    return {int(reply.content["client"]["id"]): reply.metadata.src_node_id for reply in replies}


def flower_transport(
    grid: Grid, node_of: dict[int, int]
) -> Callable[[int, list[int], Tensors, list[int]], list[ClientResult]]:
    """The transport of :func:`run_rounds` over Flower messages."""

    def train(
        round_index: int, selected: list[int], broadcast: Tensors, seeds: list[int]
    ) -> list[ClientResult]:
        messages = [
            Message(
                RecordDict(
                    {
                        "arrays": ArrayRecord(torch_state_dict=broadcast),
                        "config": ConfigRecord({"seed": seed, "round": round_index}),
                    }
                ),
                dst_node_id=node_of[k],
                message_type="train",
            )
            for k, seed in zip(selected, seeds)
        ]
        replies = {reply.metadata.src_node_id: reply for reply in grid.send_and_receive(messages)}
        results = []
        for k in selected:
            reply = replies.get(node_of[k])
            if reply is None or reply.has_error():
                raise PrivharError(
                    f"flower: client {k} sent no update in round {round_index}"
                    + (
                        f" ({reply.error.reason})"
                        if reply is not None and reply.has_error()
                        else ""
                    )
                )
            metrics = reply.content["metrics"]
            results.append(
                ClientResult(
                    reply.content["arrays"].to_torch_state_dict(),
                    int(metrics["count"]),
                    int(metrics["steps"]),
                    float(metrics["loss"]),
                )
            )
        return results

    return train


def make_server_app(
    module: torch.nn.Module,
    federation: Federation,
    counts: list[int],
    test: Shard,
    full_model_bytes: int,
    on_round: Callable[[dict[str, Any]], None] | None,
    results: list[FederationResult],
) -> ServerApp:
    """A ServerApp running Algorithm 1 (:func:`run_rounds`) over the nodes; the outcome goes to ``results``."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        node_of = _client_ids(grid, federation.clients)
        results.append(
            run_rounds(
                module,
                federation,
                counts,
                flower_transport(grid, node_of),
                test,
                full_model_bytes,
                on_round,
            )
        )

    return app


def simulate(
    module: torch.nn.Module,
    shards: list[Shard],
    test: Shard,
    federation: Federation,
    counts: list[int],
    full_model_bytes: int,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> FederationResult:
    """Run the federation on Flower's simulation engine: one SuperNode per client, messages on loopback."""
    with tempfile.TemporaryDirectory(prefix="privhar-flower-") as folder:
        module_file = Path(folder) / "module.pt"
        torch.save(module, module_file)
        shard_files = []
        for k, shard in enumerate(shards):
            shard_files.append(Path(folder) / f"shard-{k}.pt")
            torch.save(shard, shard_files[-1])
        results: list[FederationResult] = []
        run_simulation(
            server_app=make_server_app(
                module, federation, counts, test, full_model_bytes, on_round, results
            ),
            client_app=make_client_app(module_file, shard_files, federation.recipe),
            num_supernodes=federation.clients,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": {"num_cpus": 2, "include_dashboard": False},
            },
        )
        if not results:
            raise PrivharError(
                "flower: the simulation ended without a result (see Flower's log above)"
            )
        return results[0]
