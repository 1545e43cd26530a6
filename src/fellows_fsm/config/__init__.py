"""The config: the TOML file's top level, the fellows ladder's table, the lanes' tables."""
