"""Flower ServerApps and experiment drivers."""
