"""Ordered schema migrations: `NNNN_name.sql`, applied by gantry.db in one transaction."""
