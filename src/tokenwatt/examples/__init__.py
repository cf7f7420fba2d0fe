"""Bundled specs (package data): ``demo.yaml`` is what ``tokenwatt demo`` runs."""
