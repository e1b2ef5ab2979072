"""Adapters: the AWS, storage, index and model implementations of chalicelib.ports."""
