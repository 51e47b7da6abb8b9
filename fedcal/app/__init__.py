"""The Flower shell: the one ServerApp/ClientApp, engines, sweeps."""
