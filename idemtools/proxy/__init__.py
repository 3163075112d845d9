"""`idemtools proxy`: SEP-3182 idempotency in front of any MCP server, without changing it.

A leaf over the engine, the policies, the scopes and the stores: it speaks raw JSON-RPC (no MCP
SDK), so it relays servers in any language and any protocol era unchanged, and decides only the
keyed `tools/call` requests. Modules, one concept each: `config` (TOML and flags), `scope`
(whose records, who may replay), `ingress` (what a client's message must be to pass: the
rules both transports apply), `keyed` (the engine path), `unknown` ("unknown tool" told by the
upstream's answer), `faults` (an upstream lost mid-call), `stdio` and `http` (the relays),
`guard` (Host and Origin over HTTP), `encoding` (compressed HTTP bodies), `cli` (the command).
See docs/proxy.md.
"""

from __future__ import annotations

__all__: list[str] = []
