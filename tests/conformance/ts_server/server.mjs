// The SEP-3182 conformance fixture tools on the official TypeScript SDK, with no idempotency:
// the kit must report the capability missing and a keyed duplicate executed twice.
// Run: node server.mjs (stdio). The whole fixture contract is these few lines.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const counts = new Map();
const label = { type: "string" };
const schema = (extra = {}) => ({
  type: "object",
  properties: { label, payload: {}, ...extra },
  required: ["label"],
});
const tools = [
  { name: "sep3182_record", inputSchema: schema() },
  { name: "sep3182_record_slow", inputSchema: schema({ ms: { type: "integer", minimum: 0 } }) },
  { name: "sep3182_fail", inputSchema: schema() },
  { name: "sep3182_count", inputSchema: { type: "object", properties: { label }, required: ["label"] } },
  { name: "sep3182_throw", inputSchema: schema() },
];

const server = new Server({ name: "ts-fixtures", version: "0.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const { name, arguments: args = {} } = request.params;
  const key = String(args.label);
  const answer = (executions, isError = false) => ({
    content: [{ type: "text", text: JSON.stringify({ label: key, executions }) }],
    isError,
  });
  if (name === "sep3182_count") return answer(counts.get(key) ?? 0);
  if (!tools.some((tool) => tool.name === name)) throw new Error(`unknown tool ${name}`);
  const executions = (counts.get(key) ?? 0) + 1;
  counts.set(key, executions);
  if (name === "sep3182_throw") {
    // A JSON-RPC error (code 1001: outside the range JSON-RPC and MCP reserve) with data.
    throw new McpError(1001, `sep3182_throw: execution ${executions} of ${key}`, { label: key, executions });
  }
  if (name === "sep3182_record_slow") {
    await new Promise((resolve) => setTimeout(resolve, Number(args.ms ?? 0)));
  }
  return answer(executions, name === "sep3182_fail");
});
await server.connect(new StdioServerTransport());
