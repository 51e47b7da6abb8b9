"""The Flower shell: the one ServerApp and ClientApp, engines, sweeps."""
