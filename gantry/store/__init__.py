"""The database file as a thing an operator keeps: its checks, backups, restores, the
DATA_DIR lock that keeps a restore from swapping it under a running `gantry run`."""
