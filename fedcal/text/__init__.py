"""Offline text data and a small pretrained backbone for RFD-LoRA (flwr-free)."""
