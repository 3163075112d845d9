"""Adapter tests: how idemtools hooks each SDK line and server type, and its SDK contact."""
