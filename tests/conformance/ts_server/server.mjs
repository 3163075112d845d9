// The SEP-3182 conformance fixture tools on the official TypeScript SDK. By default with no
// idempotency: the kit must report the capability missing and a keyed duplicate executed twice.
// With SEP3182_TS_IDEMPOTENCY=correct, a small SEP-3182 layer the full kit must pass; with
// SEP3182_TS_IDEMPOTENCY=replacer-array, the same layer with one JavaScript bug: arguments are
// compared as JSON.stringify(args, Object.keys(args).sort()), whose replacer array also filters
// every nested object's members, so arguments that differ below the top level match.
// Run: node server.mjs (stdio). The whole fixture contract is the handler below.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const mode = process.env.SEP3182_TS_IDEMPOTENCY ?? "";
const counts = new Map();
const label = { type: "string" };
const schema = (extra = {}) => ({
  type: "object",
  properties: { label, payload: {}, ...extra },
  required: ["label"],
});
const tools = [
  { name: "sep3182_record", inputSchema: schema({ pad: { type: "integer", minimum: 0 } }) },
  { name: "sep3182_record_slow", inputSchema: schema({ ms: { type: "integer", minimum: 0 } }) },
  { name: "sep3182_fail", inputSchema: schema() },
  { name: "sep3182_count", inputSchema: { type: "object", properties: { label }, required: ["label"] } },
  { name: "sep3182_throw", inputSchema: schema() },
];

async function fixture(name, args) {
  const key = String(args.label);
  const answer = (executions, isError = false) => {
    const body = { label: key, executions };
    if (name === "sep3182_record" && Number(args.pad) > 0) body.pad = "x".repeat(Number(args.pad));
    return { content: [{ type: "text", text: JSON.stringify(body) }], isError };
  };
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
}

// -- SEP-3182, when asked for: records by key (one stdio caller), claimed before the tool runs.

// One text per parsed JSON value: members sorted at every depth (JavaScript numbers are already
// one value for 1 and 1.0).
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const members = Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`);
    return `{${members.join(",")}}`;
  }
  return JSON.stringify(value);
}

function fingerprint(name, args) {
  if (mode === "replacer-array") return JSON.stringify([name, JSON.stringify(args, Object.keys(args).sort())]);
  return JSON.stringify([name, canonical(args)]);
}

const records = new Map(); // key -> { fingerprint, done, outcome: { result } | { error } }
const refuse = (code, type, key, message) => new McpError(code, message, { type, idempotencyKey: key });

async function idempotent(name, args, key, run) {
  if (typeof key !== "string") {
    throw refuse(-32602, "idempotency_key_invalid", null, "idempotencyKey must be a string");
  }
  const fp = fingerprint(name, args);
  const record = records.get(key);
  if (record === undefined) {
    const mine = { fingerprint: fp, done: false, outcome: undefined };
    records.set(key, mine);
    try {
      mine.outcome = { result: await run() };
    } catch (error) {
      mine.outcome = { error };
    }
    mine.done = true;
    if (mine.outcome.error !== undefined) throw mine.outcome.error;
    return mine.outcome.result;
  }
  if (record.fingerprint !== fp) {
    throw refuse(-31002, "idempotency_key_conflict", key, "idempotencyKey was used with different arguments");
  }
  if (!record.done) {
    throw refuse(-31001, "idempotency_key_in_progress", key, "a request with this idempotencyKey is in progress");
  }
  if (record.outcome.error !== undefined) throw record.outcome.error;
  return record.outcome.result;
}

const capabilities = mode ? { tools: { idempotency: {} } } : { tools: {} };
const server = new Server({ name: "ts-fixtures", version: "0.0.0" }, { capabilities });
const keys = new Map(); // request id -> idempotencyKey: the SDK's params schema drops unknown members
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const { name, arguments: args = {} } = request.params;
  const key = keys.get(extra.requestId);
  keys.delete(extra.requestId);
  if (!mode || key === undefined || key === null || name === "sep3182_count") return fixture(name, args);
  return idempotent(name, args, key, () => fixture(name, args));
});
const transport = new StdioServerTransport();
await server.connect(transport);
const deliver = transport.onmessage;
transport.onmessage = (message, extra) => {
  if (message?.method === "tools/call" && message.params && "idempotencyKey" in message.params) {
    keys.set(message.id, message.params.idempotencyKey);
  }
  deliver(message, extra);
};
