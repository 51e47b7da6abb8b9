"""Flower ClientApps."""
