// The fixture tools of server.mjs, on the TypeScript SDK's Streamable HTTP transport (stateless,
// JSON answers), with no idempotency and no auth: `idemtools proxy --upstream` goes in front.
// Run: node http_server.mjs PORT (listens on 127.0.0.1:PORT/mcp).
import http from "node:http";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CallToolRequestSchema, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const counts = new Map();
const label = { type: "string" };
const schema = (extra = {}) => ({ type: "object", properties: { label, payload: {}, ...extra }, required: ["label"] });
const tools = [
  { name: "sep3182_record", inputSchema: schema() },
  { name: "sep3182_record_slow", inputSchema: schema({ ms: { type: "integer", minimum: 0 } }) },
  { name: "sep3182_fail", inputSchema: schema() },
  { name: "sep3182_count", inputSchema: { type: "object", properties: { label }, required: ["label"] } },
  { name: "sep3182_throw", inputSchema: schema() },
];

function fixtures() {
  const server = new Server({ name: "ts-fixtures-http", version: "0.0.0" }, { capabilities: { tools: {} } });
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
      throw new McpError(1001, `sep3182_throw: execution ${executions} of ${key}`, { label: key, executions });
    }
    if (name === "sep3182_record_slow") await new Promise((resolve) => setTimeout(resolve, Number(args.ms ?? 0)));
    return answer(executions, name === "sep3182_fail");
  });
  return server;
}

const port = Number(process.argv[2]);
http
  .createServer(async (req, res) => {
    if (req.url !== "/mcp" || req.method !== "POST") {
      res.writeHead(405).end();
      return;
    }
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    const server = fixtures();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  })
  .listen(port, "127.0.0.1");
