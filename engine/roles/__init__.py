"""Roles per chat: who may do what (docs/roles.md)."""
