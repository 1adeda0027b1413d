"""Payloads of the attack tests that must live in an importable module."""
