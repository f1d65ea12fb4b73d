"""Federated private training (paper 003, FedDP-STECAR): clients, aggregation, accounting, Flower."""
