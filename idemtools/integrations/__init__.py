"""Keys from the MCP clients people run: one module per framework, an extra each.

Each module depends on `idemtools.client` and `idemtools.client.keyed_session` only (never on the
engine, a store or a server adapter) and on its framework, which is imported when the module is.
See docs/clients.md for which rule each framework needs and why.
"""
